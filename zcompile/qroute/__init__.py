"""q-route: distil logged decisions into specialists that answer with a calibrated confidence or abstain."""
