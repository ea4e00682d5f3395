"""The exact-count oracle shared by the end-to-end tests: the server's /debug/counts, keyed
like stormwatch_requests_total (Agent.request_counts) plus the protocol."""

COUNT_KEYS = ("client", "verb", "group", "version", "resource", "subresource", "scope", "code")


def count_map(server_counts):
    """/debug/counts -> {(proto, client, verb, group, version, resource, subresource, scope,
    code): count}."""
    out = {}
    for c in server_counts:
        key = (c["proto"],) + tuple(c[k] for k in COUNT_KEYS)
        out[key] = out.get(key, 0) + c["count"]
    return out


def delta(after, before):
    """What was counted between two count_map snapshots (zeros dropped)."""
    d = {}
    for k, v in after.items():
        n = v - before.get(k, 0)
        if n:
            d[k] = n
    return d
