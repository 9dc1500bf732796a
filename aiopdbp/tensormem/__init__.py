"""A plain CPU tensor's memory as an ndarray, without ``t.numpy()``: the
Python form (:mod:`aiopdbp.tensormem.view`) and its compiled twin
(``cview.pyx``), which :mod:`aiopdbp.arrays` chooses between."""
