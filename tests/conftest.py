"""What several test modules share."""

import pytest


@pytest.fixture
def closing():
    """``closing(cls)`` is a factory for `cls` whose objects are closed after the test, whatever happens in it."""
    made = []

    def factory(cls):
        def make(*args, **kwargs):
            made.append(cls(*args, **kwargs))
            return made[-1]

        return make

    yield factory
    for thing in made:
        thing.close()
