"""One tool call, whichever front door it came through: the policy pipeline (`pipeline`:
judge, admit, finish), the call on a session (`call.perform`), arguments, audit, batches and
rendering of results."""
