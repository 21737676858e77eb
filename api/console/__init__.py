"""The operator console at /console: read-only HTML pages over the sessions, summaries and
jobs of one tenant (`routes`), their markup (`pages`, `assets`) and the bounded reads only
they make (`reads`). Authenticated with the API's keys, kept in a cookie (`api.auth`)."""
