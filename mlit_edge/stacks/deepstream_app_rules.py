"""deepstream-app's own rules, replayed on the app config `export-deepstream` writes, with the nvinfer config it
runs as the primary GIE (whole frames) or as a secondary GIE (the objects a detector found).

Read from DeepStream 6.2's sources (github.com/hiennguyen9874/deepstream-sources, commit f994831), cited as
FILE FUNCTION: CFP sources/apps/apps-common/src/deepstream_config_file_parser.c; APP sources/apps/sample_apps/
deepstream-app/deepstream_app_config_parser.c (parse_config_file) and deepstream_app.c; SGIE apps-common/src/
deepstream_secondary_gie_bin.c; GST sources/gst-plugins/gst-nvinfer/gstnvinfer.cpp; the key tables are
`nvinfer_rules_data.APP_GROUPS`. A rule marked [ours] is this project's. `check_app` returns the problems, one
line each; an empty list passes.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .glib_keyfile import KeyFileError
from .nvinfer_rules import load_keyfile, read_group
from .nvinfer_rules_data import APP_GROUPS, MAX_SECONDARY_GIES, PROPERTY

Group = Dict[str, Any]


def app_group(name: str) -> Optional[str]:
    """The APP_GROUPS entry a group is parsed by (APP parse_config_file: [source<N>], [sink<N>], and every group
    whose name starts with "secondary-gie", by strncmp)."""
    if name.startswith("secondary-gie"):
        return "secondary-gie"
    if name in APP_GROUPS:
        return name
    for prefix in ("source", "sink"):
        if re.fullmatch(prefix + r"[0-9]+", name):
            return prefix
    return None


def _quiet(groups: Dict[str, Dict[str, str]], name: str, rules: Dict[str, Any]) -> Group:
    """A group's values where they read; what does not read is check_nvinfer's (or another rule's) to report."""
    return read_group(groups, name, rules, "", [])


def _source_problems(values: Dict[str, Group]) -> Tuple[List[str], int]:
    """The sources and sinks, and the number of sources (a MultiURI source counts num-sources times)."""
    problems: List[str] = []
    # CFP parse_source/parse_gie/parse_sink skip a group whose enable is not a non-zero integer
    sources = [g for n, g in values.items() if app_group(n) == "source" and g.get("enable")]
    sinks = [g for n, g in values.items() if app_group(n) == "sink" and g.get("enable")]
    if not sources or not sinks:
        problems.append("no enabled [source<N>] or [sink<N>] (CFP parse_source, parse_sink: enable=0 skips it)")
    for g in sources:
        uri = g.get("uri", "")
        if g.get("type") in (2, 3) and not uri:
            problems.append("a URI source without uri (CFP parse_source)")
        if g.get("type") == 3 and "%" in uri.replace("%%", ""):
            problems.append(f"uri={uri}: a MultiURI source's uri is a printf format (APP parse_config_file: "
                            "g_strdup_printf(uri, j)), so each '%' must be written '%%'")
    return problems, sum(max(1, g.get("num-sources", 1)) if g.get("type") == 3 else 1 for g in sources)


def _gie_problems(values: Dict[str, Group]) -> List[str]:
    """The GIE groups as deepstream-app takes them: ids unique, each secondary created from the primary."""
    primary = values.get("primary-gie", {})
    pid = primary.get("gie-unique-id", 0)  # deepstream_app_main.c main: AppCtx g_malloc0'd, so 0 if not given
    second = [(n, g) for n, g in values.items() if app_group(n) == "secondary-gie" and g.get("enable")]
    problems: List[str] = []
    if len(second) > MAX_SECONDARY_GIES:
        problems.append(f"{len(second)} enabled [secondary-gie] groups: at most {MAX_SECONDARY_GIES} (APP "
                        "parse_config_file: MAX_SECONDARY_GIE_BINS)")
    for name, g in [("primary-gie", primary)] * bool(primary.get("enable")) + second:
        if not g.get("config-file"):
            problems.append(f"[{name}] needs config-file (CFP parse_gie: 'Config file not provided')")
    ids = [g.get("gie-unique-id", 0) for _, g in second]
    for (name, g), gid in zip(second, ids):
        if gid == pid:  # compared whether or not [primary-gie] is enabled
            problems.append(f"[{name}] gie-unique-id={gid} is the primary's (APP parse_config_file: 'Non unique gie "
                            "ids found'): give each GIE group its own gie-unique-id")
        elif ids.count(gid) > 1:
            problems.append(f"[{name}] gie-unique-id={gid} is another secondary's (APP parse_config_file: 'Non "
                            "unique gie id found')")
    if second and not primary.get("enable"):
        problems.append("[secondary-gie] groups without an enabled [primary-gie]: deepstream-app creates no "
                        "secondary then (deepstream_app.c create_common_elements)")
    elif not problems:
        problems += [p for n, g in second for p in _created(n, g, second, pid)]
    return problems


def _created(name: str, g: Group, second: List[Tuple[str, Group]], pid: int) -> List[str]:
    """SGIE should_create_secondary_gie: a secondary is created when it operates on the primary's id, or on a
    secondary that is created; on no id, it is silently left out; on itself or a loop, the recursion never ends."""
    chain, target, where = [name], g.get("operate-on-gie-id", 0), "(SGIE should_create_secondary_gie)"
    head = f"[{name}] operate-on-gie-id={target}"
    while target != pid:
        parent = next((n for n, other in second if other.get("gie-unique-id", 0) == target), None)
        if parent is None:
            return [f"{head}: no GIE has gie-unique-id {target} (the primary's is {pid}), so deepstream-app silently "
                    f"leaves this secondary out {where}" if len(chain) == 1 else
                    f"{head}: [{chain[-1]}] operates on no GIE's id, so neither is created {where}"]
        if parent in chain:
            what = "itself" if chain == [parent] else "a loop of secondaries (" + " -> ".join(
                f"[{n}]" for n in chain + [parent]) + ")"
            return [f"{head}: it operates on {what}, and deepstream-app recurses without end {where}"]
        chain.append(parent)
        target = dict(second)[parent].get("operate-on-gie-id", 0)
    return []


def _ours(values: Dict[str, Group], app: Path, config: Path) -> List[str]:
    """The enabled GIE groups whose config-file is `config` (CFP parse_gie: get_absolute_file_path resolves a
    relative path against the app config's folder)."""
    return [n for n, g in values.items() if app_group(n) in ("primary-gie", "secondary-gie") and g.get("enable")
            and g.get("config-file") and (app.parent / g["config-file"]).resolve() == Path(config).resolve()]


def check_app(app: Path, config: Path) -> List[str]:
    """The problems deepstream-app would have with `app`, which runs the nvinfer config `config` in its
    [primary-gie] (process-mode=1) or in a [secondary-gie<N>] (process-mode=2)."""
    app = Path(app)
    try:
        groups, infer = load_keyfile(app), load_keyfile(Path(config))
    except (KeyFileError, UnicodeDecodeError) as e:
        return [f"{app.name}: GLib would refuse it: {e}"]
    problems: List[str] = []
    values: Dict[str, Group] = {}
    for name in groups:
        rules = app_group(name)
        if rules is None:
            problems.append(f"[{name}]: [ours] a group this export does not write, so none it checks")
            continue
        values[name] = read_group(groups, name, APP_GROUPS[rules], "deepstream-app", problems)
    found, count = _source_problems(values)
    problems += found + _gie_problems(values)
    ours = _ours(values, app, Path(config))
    if len(ours) != 1:
        return problems + [f"{Path(config).name} runs in {len(ours)} enabled GIE groups of {app.name}; [ours] one"]
    name, prop = ours[0], _quiet(infer, "property", PROPERTY)
    gie, mux = values[name], values.get("streammux", {})
    primary = values.get("primary-gie", {})
    mode = 1 if name == "primary-gie" else 2
    if prop.get("process-mode", 1) != mode:  # deepstream-app sets it (create_primary_gie_bin, create_secondary_gie)
        problems.append(f"[{name}] runs {Path(config).name} with process-mode={mode}, which the file says is "
                        f"{prop.get('process-mode', 1)}: [ours] the file alone must mean what deepstream-app runs")
    if not primary.get("batch-size") == mux.get("batch-size") == count:
        problems.append(f"[ours] batch-size: streammux {mux.get('batch-size')}, primary-gie "
                        f"{primary.get('batch-size')}, sources {count}: one frame of each source per batch")
    # the group's values are set on nvinfer after it parsed the file, so they win (SGIE create_secondary_gie,
    # create_primary_gie_bin; GST gst_nvinfer_set_property); [ours] they must agree, the engine name included
    for key in ("batch-size", "gie-unique-id") + ("operate-on-gie-id", "operate-on-class-ids") * (mode == 2):
        if key in gie and gie[key] != prop.get(key, 1 if key == "batch-size" else None):
            problems.append(f"[{name}] {key}={gie[key]} overrides the nvinfer config's {prop.get(key)} (it is set on "
                            "the element after the file is read): [ours] they must agree")
    if count > 1 and values.get("tiled-display", {}).get("enable", 0) == 0:
        problems.append(f"{count} sources without [tiled-display]: deepstream-app then processes only the sources "
                        "a sink names by source-id (deepstream_app.c create_pipeline, is_sink_available_for_source_id)")
    tracker = values.get("tracker", {})
    if mode == 2 and prop.get("classifier-async-mode") and not tracker.get("enable"):
        problems.append("classifier-async-mode=1 without an enabled [tracker]: nvinfer skips every untracked object "
                        "in asynchronous mode (GST gst_nvinfer_process_objects: 'Cannot infer on untracked objects')")
    if tracker.get("enable") and not tracker.get("ll-lib-file"):
        problems.append("[tracker] without ll-lib-file: [ours] nvtracker needs its low-level library (every "
                        "sample names libnvds_nvmultiobjecttracker.so)")
    return problems


__all__ = ["app_group", "check_app"]
