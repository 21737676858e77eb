"""The console's stylesheet and script, served by Precis itself (no CDN, no build step).

Kept as strings, not files, so the package carries them wherever it is installed.
"""

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d232a;background:#fafbfc}
header{display:flex;gap:2em;align-items:center;padding:.6em 1.2em;background:#22303c;color:#fff}
header a{color:#cfe3ff;margin-right:1em}
header form.logout{display:inline;margin:0}
header form.logout button{background:none;border:0;padding:0;font:inherit;color:#cfe3ff;
text-decoration:underline;cursor:pointer}
main{padding:0 1.2em 2em}
h1{font-size:1.3em;word-break:break-all}h2{font-size:1.1em;margin-top:1.6em}h3{font-size:1em}
table{border-collapse:collapse;margin:.4em 0;max-width:100%}
th,td{border-bottom:1px solid #e1e4e8;padding:.2em .6em;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.removed td,tr.orphaned td{color:#9aa3ab;font-style:italic}
tr.highlight td{background:#fff4c2}
.problem{color:#b00020;font-weight:600}
caption{text-align:left;font-weight:600;white-space:nowrap;padding:.3em 0}
.off{color:#9aa3ab}
pre{white-space:pre-wrap;word-break:break-word;background:#f1f3f5;padding:.6em;max-height:24em;
overflow:auto}
#coverage{max-width:1100px}
.axis{display:flex;justify-content:space-between;margin-left:11em;color:#5a6570;font-size:.85em}
.lane{display:flex;align-items:center;margin:.2em 0}
.lane-name{width:11em;flex:none;font-size:.85em;color:#5a6570}
.track{position:relative;flex:1;height:1.5em;background:#eef1f4}
.bar{display:inline-block;font-size:.75em;color:#fff;border-radius:3px;padding:0 .3em;
overflow:hidden;white-space:nowrap;text-decoration:none;box-sizing:border-box;
height:1.9em;line-height:1.9em}
.track .bar{position:absolute;top:0;height:100%;line-height:2em;border:1px solid #fff}
.bar,.swatch{background:#2f7d4f}
.bar.superseded,.swatch.superseded{background:#8f9ba6}
.bar.erased,.swatch.erased{background:#c9ced3;color:#333}
.bar.fallback,.swatch.fallback{background:#c7711b}
.bar.repair,.swatch.repair{box-shadow:inset 0 -.35em 0 #6f3cc0}
.legend{display:flex;flex-wrap:wrap;gap:.4em 1.4em;font-size:.85em;color:#5a6570}
.legend .key{display:inline-flex;align-items:center;gap:.4em}
.swatch{display:inline-block;width:1.1em;height:.9em;border-radius:2px}
details#erased-summaries{margin-top:.4em}
details#erased-summaries>summary{cursor:pointer;color:#5a6570;font-size:.85em}
.scroller{max-height:45vh;overflow:auto;border:1px solid #e1e4e8;background:#fff}
.scroller table{margin:0;width:100%}
.scroller thead th{position:sticky;top:0;background:#f1f3f5}
td.item-id{font:12px ui-monospace,monospace;word-break:break-all;max-width:18em}
tr.fork-point td{border-bottom:2px dashed #5a6570}
tr:target td{background:#fff4c2}
"""
"""The console's stylesheet: removed messages greyed, summaries as bars by state."""

JS = """
document.addEventListener("DOMContentLoaded", function () {
  var rows = document.querySelectorAll("#timeline tr[data-seq]");
  document.querySelectorAll(".track .bar").forEach(function (bar) {
    var first = Number(bar.dataset.firstSeq), last = Number(bar.dataset.lastSeq);
    function mark(on) {
      rows.forEach(function (row) {
        var seq = Number(row.dataset.seq);
        row.classList.toggle("highlight", on && seq >= first && seq <= last);
      });
    }
    bar.addEventListener("mouseenter", function () { mark(true); });
    bar.addEventListener("mouseleave", function () { mark(false); });
  });
  var box = document.getElementById("timeline-box");
  var context = document.getElementById("context");
  if (box && box.dataset.open === "end" && !window.location.hash) {
    box.scrollTop = box.scrollHeight;
    if (context) {
      var top = context.getBoundingClientRect().top;
      if (top > window.innerHeight / 2) { window.scrollBy(0, top - window.innerHeight / 2); }
    }
  }
});
"""
"""Hovering a summary's bar highlights the timeline rows it covers. The newest page opens at
its newest rows (unless the address names a row): the timeline's box scrolled to its end, and
the window scrolled until the context preview starts at its middle, the box (at most 45% of
the window high) just above it."""
