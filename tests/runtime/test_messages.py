"""The progress lines on stderr: one record, one line, control characters escaped; a report of several
lines that our code composed stays several lines."""
import logging

from mlit_edge.base.messages import log_lines, log_to_stderr


def test_a_composed_report_prints_line_by_line_and_a_forged_newline_stays_escaped(capsys):
    log_to_stderr()
    log = logging.getLogger("mlit_edge.test_messages")
    log_lines(log, "routing kept per layer:\n  layer 0: 1.000\n  layer 1: 0.998")
    log.info("file a\nFAKE: line\x1b]0;title\x07")
    err = capsys.readouterr().err.splitlines()
    assert err[:3] == ["routing kept per layer:", "  layer 0: 1.000", "  layer 1: 0.998"]
    assert err[3] == "file a\\nFAKE: line\\x1b]0;title\\x07" and len(err) == 4
