"""The toolkit: diagnostics that work on anyone's model and training run.

Its functions take plain objects (a model, a batch, a loss function, an optimizer, a list of
losses, a history dict); none needs the course's ``Pipeline`` or its training loop, and nothing here
imports anything of ``course`` outside ``course.toolkit`` (``tests/test_layout.py`` checks it). Use it on your own run after the
course; ``examples/own_model.py`` is a worked example.
"""
