"""The artifact record and its file contracts: the sidecar beside every artifact (read, written, published
with it), its schema (`ArtifactRecord`), the input convention and preprocessing a graph expects, the formats
and their suffixes, what a graph's bytes say of themselves, and the rules for the files a command writes
(no clobbering, staging folders). Torch-free; it stands on `base` alone."""
