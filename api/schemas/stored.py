"""What the databases store faithfully (`api.json_values`), said in JSON Schema.

The checks themselves run in the models' validators, with their own words; these types only
make the OpenAPI document say the same, so a client generating requests from it is not
refused what the document allows. What JSON Schema cannot say (lone surrogates, nesting
deeper than `MAX_JSON_DEPTH`) is in the operations' descriptions instead.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from typing_extensions import TypeAliasType

from api.json_values import MAX_JSON_INT

NO_NUL_PATTERN = r"^[^\x00]*$"
"""Text without NUL characters: PostgreSQL stores none, so neither database takes one."""

StoredText = Annotated[str, Field(json_schema_extra={"pattern": NO_NUL_PATTERN})]
"""A string the databases store as given: the document says it has no NUL (the validators
check it)."""


class TextKeys:
    """An object's keys are text without NUL: JSON Schema's `propertyNames`, where pydantic
    would write `patternProperties` (which leaves any other key allowed)."""

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        ((_, value),) = schema.pop("patternProperties").items()
        return {
            **schema,
            "propertyNames": {"pattern": NO_NUL_PATTERN},
            "additionalProperties": value,
        }


_TWO_TO_63 = MAX_JSON_INT + 1
"""The integer bound as an exclusive one: FastAPI writes bounds as floats (`api.openapi` makes
an integer's exact again), and 2**63 survives that (2**63 - 1 does not)."""

_Key = Annotated[str, Field(pattern=NO_NUL_PATTERN)]
_Integer = Annotated[int, Field(gt=-_TWO_TO_63, lt=_TWO_TO_63)]
_Fraction = Annotated[float, Field(json_schema_extra={"not": {"type": "integer"}})]

StoredValue = TypeAliasType(
    "StoredValue",
    "StoredText | _Integer | _Fraction | bool | list[StoredValue] "
    "| Annotated[dict[_Key, StoredValue], TextKeys()] | None",
)
"""Any JSON value the databases store faithfully: text without NUL, integers within 64 bits,
and arrays and objects of such values. Only for the document: never a validator."""


def _as_given(value: Any) -> Any:
    return value


StoredObject = Annotated[
    dict[str, Any],
    BeforeValidator(
        _as_given, json_schema_input_type=Annotated[dict[_Key, StoredValue], TextKeys()]
    ),
]
"""A JSON object the client keeps (`metadata`), validated as any object (its values are
checked by `check_json_value`), documented as `StoredValue`s under keys without NUL."""
