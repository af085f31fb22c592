"""Pure codecs of the arrowshuffle format: index sidecar, manifest, checksums, errors."""
