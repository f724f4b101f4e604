"""The Redis journal adapter: journal, publisher, gap-fill service, embedded redis-server."""
