"""The operator console at /console: read-only HTML pages over the sessions, summaries and
jobs of one tenant (`routes`), their markup (`html` and `labels`, shared; one module per page,
`*_page`; `assets`); the bounded reads only they make are `api.store.console`. Authenticated
with the API's keys, kept in a cookie (`api.auth`)."""
