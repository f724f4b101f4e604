"""The subscription interface over HTTP: the sans-IO API and its standard-library server."""
