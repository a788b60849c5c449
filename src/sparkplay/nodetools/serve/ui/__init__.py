"""The gateway's cluster page (index.html, app.js) and the charting library it vendors (VENDORED.md)."""
