"""Reader conformance: every vector of tests/vectors/v1 through every reader surface.

``vectors.py`` turns the vectors into cases and holds the one table (``SEEN_BY``) of the kinds
of surface that see each rule; ``surfaces.py`` declares what a surface provides and the tests
every surface runs; ``test_surfaces.py`` holds the surfaces. A new surface joins with one
subclass of ``ReadsVectors`` or ``ValidatesVectors`` that sets ``KIND`` and ``TAKES`` and
overrides its one fixture (``read_vector`` or ``validate_vector``).
"""
