"""The wires of other APIs that Precis speaks: each module translates, the turn is shared."""
