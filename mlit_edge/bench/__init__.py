"""`mlit-edge bench`: the configuration (`options`), one artifact's bench (`one_artifact`: timing in `stats`,
fidelity against the reference, host memory in `host`, power on a Jetson in `power`), one process per
artifact (`isolation`), the whole command over several artifacts (`suite`), the report (`report`), and the
command as a Python call (`call`).

The package is callable: `mlit_edge.bench([...])` is `call.bench`, the CLI's bench with the CLI's defaults.
"""
import sys
import types


class _CallableBench(types.ModuleType):
    """This package, callable as `mlit_edge.bench(artifacts, **kw)` (the name cannot be both a package and a
    function of `mlit_edge`, and the package is imported whenever a bench runs)."""

    def __call__(self, artifacts, json=None, plot=None, **kw):
        from .call import bench

        return bench(artifacts, json, plot, **kw)


sys.modules[__name__].__class__ = _CallableBench
