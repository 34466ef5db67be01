"""Guards shared by several wings: the URL guard every outbound address passes and the scrubber
that keeps the operator's secrets out of history, logs and model requests."""
