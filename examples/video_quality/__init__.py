"""Video-quality analysis of many live H.264 streams over aiopdbp (the PDBP paper's application).

Ingest GPs decode each stream's current frame to YUV 4:2:0 with a decoder per
stream and send the frames in stacked batches to analyser GPs (numpy NGPs, or
CuPy SGPs on a GPU), which compute blur, smoothness and blockiness for a whole
batch at once and flag blurred, frozen and choppy streams; a collector writes
the CSV and the per-stream summary.  See README.md in this directory, and run
``python -m examples.video_quality --help`` from the repository root.

Modules: :mod:`.scenes` (test clips), :mod:`.ingest` (decoders), :mod:`.kernels`
(measures and verdicts), :mod:`.schedule` (placement), :mod:`.pipeline` (the
GPs), :mod:`.report` (CSV, summary, timing), :mod:`.tune` (thresholds).
"""
