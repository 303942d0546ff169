"""The client that EVALS_CLIENT names after `serve` failed inside
eval "$(python examples/local-model/serve)": importing this file fails with the reason, so the
next `python evals.py` stops (exit 2) before it calls a model or writes a record. Without it, a
shell that never got the settings would replay recordings.jsonl as if no model were configured,
and one holding an earlier server's settings would call an address where nothing answers.
The next `serve` that succeeds unsets EVALS_CLIENT."""

raise ImportError(
    "the last examples/local-model/serve failed (its messages say why): fix that and run "
    'eval "$(python examples/local-model/serve)" again, or unset EVALS_CLIENT to call '
    "my_client with the settings this shell has"
)
