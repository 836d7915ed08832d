"""The web UI in a real browser against the whole stack: Debian's Chromium, headless, driven by
Playwright, on the pages the gateway serves under ``/ui/`` with its Content-Security-Policy in force.

- A user signs in with an API token, creates a knowledge base, uploads a real document through the
  file input, watches it become ready, asks a question, sees the answer stream and opens the cited
  passage from its citation chip; then switches the UI to Chinese and does the same with a Chinese
  document (``../shared/data/office-docs``; skipped without it).
- axe-core checks every page of :data:`PAGES` at 1280 and 390 pixels wide: no violation of impact
  "serious" or "critical", and no page wider than the window.
- A second tenant signs in and sees none of the first tenant's data on any page, nor through a direct
  link to the first tenant's knowledge base or conversation.

The chat model is the scripted OpenAI-compatible server of the e2e suite (its answers cite ``[[c1]]``).
Screenshots of every page visited go to ``build/ui-screenshots/`` (printed at the end of each test).
Without Chromium at ``/usr/bin/chromium`` (Debian's ``chromium`` package) the tests skip, or fail when
``KS_TEST_REQUIRE_BROWSER=1`` (CI, which installs it). Playwright never downloads a browser here.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, expect, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from .test_conversation import ask, client, tenant
from .test_gateway_ingestion import create_kb, events, upload

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "modelhub" / "tests"))
from scripted_provider import (
    Recorded,
    Reply,
    ScriptedProvider,
    openai_decision,
    openai_text_stream,
    openai_tool_call_stream,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "build" / "ui-screenshots"
AXE_SCRIPT = ROOT / "frontend" / "node_modules" / "axe-core" / "axe.min.js"
CHROMIUM = Path(os.environ.get("KS_TEST_CHROMIUM", "/usr/bin/chromium"))
# CI installs Chromium: there a missing browser fails the browser tests instead of skipping them.
REQUIRE_BROWSER = os.environ.get("KS_TEST_REQUIRE_BROWSER", "") == "1"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Without these Chromium reaches for Google's services, which a closed network never answers.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDTHS = {"desktop": 1280, "phone": 390}
HEIGHT = 860
BLOCKING_IMPACTS = ("serious", "critical")
ACTION_TIMEOUT_MS = 30_000
READY_TIMEOUT_MS = 180_000
ANSWER_TIMEOUT_MS = 90_000
VIEW_RENDERED = "#main > *"
"""Present once the router has resolved the address and shown its page (or sent it elsewhere)."""
SETTLE_QUIET_MS = 300
SETTLE_MAX_MS = 5_000
ANSWER_CHUNK_DELAY_SECONDS = 0.3
"""Between the scripted answer's pieces: long enough for the page to show each one on its own."""

ENGLISH_DOCUMENT = "office-docs/markitdown/test.pdf"
CHINESE_DOCUMENT = "office-docs/unstructured/simplified_chinese.pdf"
ENGLISH_QUESTION = "Why would several agents cooperate?"
CHINESE_QUESTION = "这本教材的主编是谁？"
# What the scripted model answers to each question; anything else gets the generic answer.
ANSWERS = {
    ENGLISH_QUESTION: [
        "Multi-agent conversations",
        " let LLM agents cooperate",
        " and check each other's work",
        " [[c1]].",
    ],
    CHINESE_QUESTION: ["根据编写人员名单，", "这本教材的主编", "是贾益民", "[[c1]]。"],
}
GENERIC_ANSWER = ["Every employee gets 27 days", " of paid annual leave", " [[c1]]."]
HANDBOOK = (
    b"# Employee handbook\n\n"
    b"## Annual leave\n\n"
    b"Every employee gets 27 days of paid annual leave per calendar year. "
    b"Unused leave can be carried over until the end of March.\n"
)


@dataclass(frozen=True)
class UiPage:
    """A page of the UI the accessibility check visits.

    ``path`` is under ``/ui`` with ``{kb}`` and ``{session}`` standing for the signed-in tenant's
    knowledge base and conversation; ``ready`` is what shows once the page has its content (the page's
    heading by default); ``then`` acts on the page before it is checked (opens a panel).
    """

    name: str
    path: str
    ready: str = "main h1"
    then: Callable[[Page], None] | None = None
    widths: tuple[str, ...] = ("desktop", "phone")


def _open_first_citation(page: Page) -> None:
    page.locator("button.citation-chip").first.click()
    page.locator(".passage").wait_for()


def _open_conversations(page: Page) -> None:
    """On a phone the conversations are a panel opened from the chat's toolbar."""
    page.locator(".sessions-toggle").click()
    page.locator(".chat-sessions .session-list a").first.wait_for()


PAGES = [
    UiPage("chat", "/chat"),
    UiPage("chat with an answer", "/chat/{session}", ready="button.citation-chip"),
    UiPage(
        "chat with the cited passage open", "/chat/{session}", "button.citation-chip", _open_first_citation
    ),
    UiPage(
        "chat with the conversations open",
        "/chat/{session}",
        "button.citation-chip",
        _open_conversations,
        widths=("phone",),
    ),
    UiPage("knowledge bases", "/knowledge", ready=".kb-list a"),
    UiPage("one knowledge base", "/knowledge/{kb}", ready="table.documents"),
    UiPage("a knowledge base that is not there", "/knowledge/not-a-knowledge-base", ready="[role=alert]"),
    UiPage("retrieval testing", "/knowledge/{kb}/search"),
    UiPage("evaluations", "/knowledge/{kb}/evaluations"),
    UiPage("agents", "/agents"),
    UiPage("orchestrators", "/orchestrators"),
    UiPage("applications", "/applications"),
    UiPage("skills", "/skills"),
    UiPage("models", "/models"),
    UiPage("memory", "/memory"),
]
LOGIN_PAGE = UiPage("login", "/login", ready="#login-token")
"""Checked signed out, before the others."""


REFLOW = "reflow"
"""The check of :func:`reflow_violations`, reported beside axe-core's rules."""


@dataclass(frozen=True)
class Violation:
    page: str
    width: int
    rule: str
    impact: str
    help: str
    targets: tuple[str, ...]
    summary: str


# --- the browser ------------------------------------------------------------------------------------


def _browser_away(reason: str) -> NoReturn:
    if REQUIRE_BROWSER:
        pytest.fail(f"{reason} (KS_TEST_REQUIRE_BROWSER=1: the browser tests must run)", pytrace=False)
    pytest.skip(reason)


# For the session, and first in each test's arguments: without a browser a test skips before the
# stack starts.
@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        _browser_away(
            f"Chromium not found at {CHROMIUM}: install Debian's chromium package "
            "(apt-get install chromium) to run the web UI's browser tests"
        )
    if not AXE_SCRIPT.is_file():
        _browser_away(f"axe-core not found at {AXE_SCRIPT}: run `npm ci` in frontend/ (make setup does)")
    playwright: Playwright = sync_playwright().start()
    try:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    except Exception as exc:
        playwright.stop()
        _browser_away(f"Chromium at {CHROMIUM} did not start: {exc}")
    yield launched
    launched.close()
    playwright.stop()


@pytest.fixture(scope="module")
def screenshots() -> Path:
    """The folder of this run's screenshots, emptied first."""
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True)
    return SCREENSHOTS


@dataclass
class Run:
    """What a test saw, printed at its end: screenshots taken and notes."""

    folder: Path
    shots: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    prefix: str = ""
    """Put before the name of each screenshot (the UI's language)."""
    page_errors: list[str] = field(default_factory=list)

    def tab(self, context: BrowserContext) -> Page:
        """A new tab whose uncaught script errors and refusals by the Content-Security-Policy are kept
        (:meth:`check_page_errors`)."""
        page = context.new_page()
        page.on("pageerror", lambda error: self.page_errors.append(f"{page.url}: {error}"))
        # A missing chunk: the build changed under the running page (a rebuild in the same checkout).
        page.on(
            "response",
            lambda response: (
                self.page_errors.append(f"{response.url}: HTTP {response.status}")
                if "/ui/assets/" in response.url and response.status >= 400
                else None
            ),
        )
        page.on(
            "console",
            lambda message: (
                self.page_errors.append(f"{page.url}: {message.text}")
                if message.type == "error" and "Content Security Policy" in message.text
                else None
            ),
        )
        return page

    def wait_rendered(self, page: Page) -> None:
        """Waits until the router has resolved the address and shown a page (or sent it elsewhere)."""
        try:
            page.locator(VIEW_RENDERED).first.wait_for(state="attached")
        except PlaywrightTimeoutError:
            seen = "; ".join(self.page_errors) or "no error"
            pytest.fail(f"{page.url} showed no page within {ACTION_TIMEOUT_MS} ms; the browser saw: {seen}")

    def check_page_errors(self) -> None:
        assert not self.page_errors, "the pages failed in the browser:\n" + "\n".join(self.page_errors)

    def shoot(self, page: Page, name: str) -> None:
        number = len(list(self.folder.glob("*.png")))
        path = self.folder / f"{number:03d}-{_slug(f'{self.prefix} {name}')}.png"
        page.screenshot(path=str(path), full_page=True, animations="disabled")
        self.shots.append(path)

    def report(self, capsys: pytest.CaptureFixture[str], title: str) -> None:
        with capsys.disabled():
            print(f"\n{title}: {len(self.shots)} screenshots in {self.folder}")
            for note in self.notes:
                print(f"  {note}")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


@pytest.fixture
def run(
    screenshots: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> Iterator[Run]:
    seen = Run(screenshots)
    yield seen
    seen.report(capsys, request.node.name)


def new_context(browser: Browser, width: int = WIDTHS["desktop"]) -> BrowserContext:
    context = browser.new_context(viewport={"width": width, "height": HEIGHT}, locale="en-US")
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    return context


def sign_in(page: Page, stack: Any, token: str) -> None:
    """Signs in through the login page with ``token``."""
    page.goto(f"{stack.gateway_url}/ui/login")
    page.locator("#login-token").fill(token)
    page.locator("form button[type=submit]").click()
    page.wait_for_url(re.compile(r"/ui/chat$"))


def settle(page: Page) -> None:
    """Waits until the page has stopped changing for a moment (data loaded and rendered)."""
    page.evaluate(
        """([quiet, most]) => new Promise((resolve) => {
            const done = () => { observer.disconnect(); clearTimeout(limit); resolve(true) }
            let timer = setTimeout(done, quiet)
            const observer = new MutationObserver(() => {
                clearTimeout(timer)
                timer = setTimeout(done, quiet)
            })
            const limit = setTimeout(done, most)
            const all = { subtree: true, childList: true, attributes: true, characterData: true }
            observer.observe(document.body, all)
        })""",
        [SETTLE_QUIET_MS, SETTLE_MAX_MS],
    )


def visible_text(page: Page) -> str:
    return str(page.evaluate("document.body.innerText"))


# --- the platform's side ----------------------------------------------------------------------------


def scripted_answers(request: Recorded) -> Reply:
    """Every question is a knowledge-base search: the model searches with the question, then answers
    citing the first passage found, piece by piece."""
    body = request.json
    decision = openai_decision("E", body)  # kb_search
    if decision is not None:
        return decision
    messages = body["messages"]
    question = _text([m for m in messages if m["role"] == "user"][-1]["content"])
    if messages[-1]["role"] == "tool":
        pieces = next((a for q, a in ANSWERS.items() if q in question), GENERIC_ANSWER)
        return dataclasses.replace(openai_text_stream(pieces), chunk_delay=ANSWER_CHUNK_DELAY_SECONDS)
    return openai_tool_call_stream("doc_retrieval", {"query": question})


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


@pytest.fixture
def scripted(model_server: ScriptedProvider) -> ScriptedProvider:
    model_server.reset()
    model_server.respond("/v1/chat/completions", scripted_answers)
    return model_server


@dataclass
class TenantData:
    """A tenant of its own, its admin token for the UI, and what it holds; every name it gave carries
    ``marker``, which no other tenant may ever see."""

    headers: dict[str, str]
    token: str
    marker: str
    kb_id: str = ""
    session_id: str = ""


def new_tenant(stack: Any, server: ScriptedProvider, marker: str) -> TenantData:
    """A tenant whose default chat model is the scripted one (named with ``marker``), and a token."""
    headers = tenant()
    with client(stack, headers) as http:
        created = http.post("/tokens", json={"name": f"web ui {marker}", "role": "admin"})
        assert created.status_code == 201, created.text
        model = http.post(
            "/models",
            json={
                "display_name": f"scripted chat {marker}",
                "provider_id": "custom",
                "model_name": "scripted-chat",
                "types": ["knowledge_qa"],
                "base_url": f"{server.url}/v1",
                "api_key": "sk-e2e-scripted-0001",
            },
        )
        assert model.status_code == 201, model.text
        default = http.put("/models/defaults/knowledge_qa", json={"model_id": model.json()["id"]})
        assert default.status_code == 200, default.text
    return TenantData(headers=headers, token=created.json()["token"], marker=marker)


@pytest.fixture(scope="module")
def owner(stack: Any, model_server: ScriptedProvider) -> TenantData:
    """A tenant with something on every page: a knowledge base with a ready document, a conversation
    with cited answers, an agent, a model, and a remembered statement (made through the API)."""
    model_server.reset()
    model_server.respond("/v1/chat/completions", scripted_answers)
    marker = f"owner{uuid.uuid4().hex[:8]}"
    data = new_tenant(stack, model_server, marker)
    with client(stack, data.headers) as http:
        kb = create_kb(http, name=f"handbook {marker}", description=f"the handbook of {marker}")
        uploaded = upload(http, kb["id"], f"handbook-{marker}.md", HANDBOOK)
        assert uploaded.status_code == 201, uploaded.text
        document = uploaded.json()["document"]
        with http.stream("GET", f"/documents/{document['id']}/progress") as stream:
            statuses = [progress["status"] for _, progress in events(stream)]
        assert statuses[-1] == "ready", statuses
        agent = http.post("/agents", json={"name": f"agent-{marker}", "system_prompt": "Answer briefly."})
        assert agent.status_code == 201, agent.text
        session = http.post("/sessions", json={})
        assert session.status_code == 201, session.text
        data.session_id = session.json()["id"]
        # Two cited answers (the document becomes a frequent one) and a statement to remember.
        for question in (
            f"At {marker}, how many days of annual leave do employees get?",
            "Can leave carry over?",
        ):
            turn = ask(http, question, session_id=data.session_id, knowledge_base_ids=[kb["id"]])
            assert turn[-1][0] == "completed" and turn[-1][1]["citations"], turn[-1]
        ask(http, f"remember: my team is called {marker}", session_id=data.session_id)
    data.kb_id = kb["id"]
    return data


# --- a user's way through the UI ----------------------------------------------------------------------


def create_knowledge_base(page: Page, run: Run, name: str) -> None:
    page.locator("nav a[href$='/knowledge']").click()
    page.wait_for_url(re.compile(r"/ui/knowledge$"))
    page.locator("#kb-name").fill(name)
    run.shoot(page, "knowledge bases, creating one")
    page.locator("form.kb-form button[type=submit]").click()
    page.wait_for_url(re.compile(r"/ui/knowledge/[^/]+$"))
    expect(page.locator("main h1")).to_have_text(name)


def upload_until_ready(page: Page, run: Run, document: Path, ready_label: str) -> None:
    """Chooses ``document`` in the file input and follows its row until it shows ``ready_label``."""
    page.locator("input[type=file]").set_input_files(str(document))
    row = page.locator("table.documents tbody tr", has_text=document.name)
    expect(row).to_be_visible()
    run.shoot(page, "knowledge base, document uploaded")
    expect(row.locator(".n-tag")).to_have_text(ready_label, timeout=READY_TIMEOUT_MS)
    expect(row.locator("[role=progressbar]")).to_have_attribute("aria-valuenow", "100")
    expect(row.locator(".doc-name small")).to_contain_text(re.compile(r"[1-9]"))  # its passages counted
    run.shoot(page, "knowledge base, document ready")


def ask_and_open_the_source(
    page: Page, run: Run, kb_name: str, question: str, answer: list[str], citation_label: str
) -> str:
    """Asks ``question`` of ``kb_name`` in the chat, checks the answer streamed piece by piece and cites
    ``citation_label``; opens the cited passage and returns its text."""
    page.locator("nav a[href$='/chat']").click()
    page.wait_for_url(re.compile(r"/ui/chat$"))
    page.locator(".kb-select .n-base-selection").click()
    page.keyboard.type(kb_name)
    page.locator(".n-base-select-option", has_text=kb_name).click()
    page.keyboard.press("Escape")
    expect(page.locator(".kb-select .n-base-selection")).to_contain_text(kb_name)
    page.locator("#chat-input").fill(question)
    run.shoot(page, "chat, asking")
    # Every text the answer shows on its way, recorded in the page as it changes.
    page.evaluate(
        """() => {
            const seen = (window.__answerTexts = [])
            new MutationObserver(() => {
                const answers = document.querySelectorAll('li.message-assistant .answer-text')
                const text = answers.length ? answers[answers.length - 1].textContent : ''
                if (text && seen[seen.length - 1] !== text) seen.push(text)
            }).observe(document.querySelector('ol.messages'),
                       { subtree: true, childList: true, characterData: true })
        }"""
    )
    page.locator("#chat-input").press("Enter")
    page.wait_for_url(re.compile(r"/ui/chat/[^/]+$"))
    chip = page.locator("li.message-assistant button.citation-chip").first
    expect(chip).to_have_attribute("aria-label", citation_label, timeout=ANSWER_TIMEOUT_MS)
    final = "".join(answer).replace("[[c1]]", "[1]")
    expect(page.locator("li.message-assistant .answer-text").last).to_have_text(final)
    expect(page.locator("#chat-input")).to_be_editable()
    shown: list[str] = page.evaluate("window.__answerTexts")
    partial = [text for text in shown if text != final]
    assert len(partial) >= 2 and all(final.startswith(text) for text in partial), (
        f"the answer did not stream piece by piece: the page showed {shown}"
    )
    expect(page.locator(".session-list")).to_contain_text(question)
    run.shoot(page, "chat, answered")
    chip.click()
    passage = page.locator(".n-drawer .passage")
    expect(passage).to_be_visible()
    run.shoot(page, "chat, cited passage open")
    text = passage.inner_text()
    page.keyboard.press("Escape")
    expect(passage).to_be_hidden()
    return text


def test_a_user_signs_in_builds_a_knowledge_base_and_gets_cited_answers_in_english_and_chinese(
    browser: Browser, shared_data: Path, stack: Any, scripted: ScriptedProvider, run: Run
) -> None:
    english, chinese = shared_data / ENGLISH_DOCUMENT, shared_data / CHINESE_DOCUMENT
    for document in (english, chinese):
        if not document.is_file():
            pytest.skip(f"{document} not found (expected in ../shared/data/office-docs)")
    marker = uuid.uuid4().hex[:6]
    user = new_tenant(stack, scripted, marker)
    context = new_context(browser)
    page = run.tab(context)
    try:
        run.prefix = "en"
        page.goto(f"{stack.gateway_url}/ui/")
        expect(page).to_have_url(re.compile(r"/ui/login\?redirect="))
        expect(page.locator("main h1")).to_have_text("Sign in")
        run.shoot(page, "login")
        sign_in(page, stack, user.token)
        expect(page.locator(".chat-sessions")).to_contain_text("No conversations yet.")
        run.shoot(page, "chat, empty")

        english_kb = f"agents paper {marker}"
        create_knowledge_base(page, run, english_kb)
        upload_until_ready(page, run, english, "Ready")
        expect(page.locator(".kb-header")).to_contain_text("1 document")
        passage = ask_and_open_the_source(
            page, run, english_kb, ENGLISH_QUESTION, ANSWERS[ENGLISH_QUESTION], f"Source 1: {english.name}"
        )
        # A passage of the paper's introduction (which of its two passages ranks first is retrieval's).
        assert "multi-agent" in passage.lower() or "large language models" in passage.lower(), passage

        page.locator("#ui-language").select_option("zh")
        expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
        expect(page.locator("nav a[href$='/knowledge']")).to_have_text("知识库")
        run.prefix = "zh"
        run.shoot(page, "chat")
        chinese_kb = f"汉语教材 {marker}"
        create_knowledge_base(page, run, chinese_kb)
        upload_until_ready(page, run, chinese, "就绪")
        passage = ask_and_open_the_source(
            page, run, chinese_kb, CHINESE_QUESTION, ANSWERS[CHINESE_QUESTION], f"来源 1：{chinese.name}"
        )
        assert "贾益民" in passage, passage
        # The language stays chosen on the next page.
        page.locator("nav a[href$='/knowledge']").click()
        expect(page.locator("main h1")).to_have_text("知识库")
        expect(page.locator(".kb-list")).to_contain_text(english_kb)
        expect(page.locator(".kb-list")).to_contain_text(chinese_kb)
        run.shoot(page, "knowledge bases")
    finally:
        context.close()
    run.check_page_errors()


# --- accessibility ------------------------------------------------------------------------------------


def test_an_evaluation_started_from_a_question_list_shows_its_figures_and_compares_with_another(
    browser: Browser, stack: Any, owner: TenantData, run: Run, tmp_path: Path
) -> None:
    """A labelled question list picked in the page runs through retrieval for real; the run's page shows
    the figures the API reports, and two runs compare."""
    handbook = f"handbook-{owner.marker}.md"
    questions = tmp_path / "questions.csv"
    questions.write_text(
        "id,question,relevant\n"
        f"leave,How many days of annual leave do employees get?,{handbook}\n"
        f"carry,Until when can unused leave be carried over?,handbook-{owner.marker}\n"
        "missing,What is the parking policy?,no-such-document.pdf\n",
        encoding="utf-8",
    )
    context = new_context(browser)
    page = run.tab(context)
    run_ids: list[str] = []
    try:
        sign_in(page, stack, owner.token)
        for name, modes in (("all modes", None), ("bm25 only", ("vector", "hybrid"))):
            page.goto(f"{stack.gateway_url}/ui/knowledge/{owner.kb_id}/evaluations")
            page.locator("#eval-name").wait_for()
            page.locator("#eval-name").fill(f"{name} {owner.marker}")
            # Naive UI's radio input is hidden behind its label: the label is what a user clicks.
            page.get_by_text("Question list (CSV or JSONL)", exact=True).click()
            expect(page.get_by_role("radio", name="Question list (CSV or JSONL)")).to_be_checked()
            with page.expect_file_chooser() as chooser:
                page.get_by_role("button", name="Choose file: Question list (.csv or .jsonl)").click()
            chooser.value.set_files(str(questions))
            expect(page.locator(".ready-text")).to_contain_text("3 questions ready to run")
            for mode in modes or ():
                page.get_by_role("checkbox", name=re.compile(mode, re.IGNORECASE)).uncheck()
            page.get_by_role("button", name="Start the evaluation").click()
            page.wait_for_url(re.compile(r"/ui/evaluations/eval_[0-9a-f]+$"))
            run_ids.append(urlsplit(page.url).path.rsplit("/", 1)[-1])
            expect(page.locator("table.metrics-table")).to_be_visible(timeout=60_000)
            settle(page)
            run.shoot(page, f"evaluation {name}")
        with client(stack, owner.headers) as http:
            first = http.get(f"/evaluations/{run_ids[0]}").json()
            second = http.get(f"/evaluations/{run_ids[1]}").json()
        assert first["status"] == second["status"] == "completed", (first, second)
        assert set(first["metrics"]) == {"hybrid", "vector", "bm25"} and set(second["metrics"]) == {"bm25"}
        # The handbook is the only document: both judged questions find it first; the third names a
        # document that is not there and scores 0.
        assert first["metrics"]["bm25"]["ndcg_at_10"] == pytest.approx(2 / 3, abs=1e-6), first["metrics"]
        table = page.locator("table.metrics-table")
        expect(table).to_contain_text("0.667")
        expect(page.locator("svg")).not_to_have_count(0)
        page.goto(f"{stack.gateway_url}/ui/evaluations/compare?a={run_ids[0]}&b={run_ids[1]}")
        expect(page.locator("main")).to_contain_text(f"bm25 only {owner.marker}")
        expect(page.locator("main")).to_contain_text("±0.000")
        settle(page)
        run.shoot(page, "evaluation compared")
    finally:
        context.close()
    run.check_page_errors()


def axe_violations(page: Page, name: str, width: int) -> list[Violation]:
    """axe-core's violations on the page as it is now; the script is evaluated through the browser's
    debugging protocol, which the page's Content-Security-Policy does not govern."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE_SCRIPT.read_text(encoding="utf-8"))
    found = page.evaluate(
        """async () => {
            const results = await axe.run(document, { resultTypes: ['violations'] })
            return results.violations.map((v) => ({
                id: v.id, impact: v.impact || '', help: v.help,
                nodes: v.nodes.map((n) => ({ target: n.target.join(' '), summary: n.failureSummary || '' })),
            }))
        }"""
    )
    return [
        Violation(
            page=name,
            width=width,
            rule=v["id"],
            impact=v["impact"],
            help=v["help"],
            targets=tuple(n["target"] for n in v["nodes"]),
            summary=" / ".join(dict.fromkeys(" ".join(n["summary"].split()) for n in v["nodes"])),
        )
        for v in found
    ]


OVERFLOWING = """() => {
    const limit = document.documentElement.clientWidth + 1
    const name = (e) => e.tagName.toLowerCase() + (e.id ? `#${e.id}` : '')
        + [...e.classList].slice(0, 2).map((c) => `.${c}`).join('')
    const all = [...document.body.querySelectorAll('*')]
    const wide = all.filter((e) => e.getBoundingClientRect().right > limit)
    const outermost = wide.filter((e) => !wide.includes(e.parentElement))
    return { width: document.documentElement.scrollWidth, elements: outermost.slice(0, 5).map(name) }
}"""
"""How wide the page is, and the outermost elements reaching past the viewport's right edge."""


def reflow_violations(page: Page, name: str, width: int) -> list[Violation]:
    """Content wider than the viewport, so that reading it takes scrolling sideways (WCAG 1.4.10 asks
    for none at 320 CSS pixels); axe-core has no rule for it."""
    found = page.evaluate(OVERFLOWING)
    if found["width"] <= width:
        return []
    return [
        Violation(
            page=name,
            width=width,
            rule=REFLOW,
            impact="serious",
            help="Content must fit the viewport's width without scrolling sideways",
            targets=tuple(found["elements"]),
            summary=f"the page is {found['width']} px wide in a {width} px viewport",
        )
    ]


def open_page(page: Page, run: Run, stack: Any, data: TenantData, entry: UiPage) -> bool:
    """Navigates to ``entry``; False when the router does not know its path (it shows the chat)."""
    path = "/ui" + entry.path.format(kb=data.kb_id, session=data.session_id)
    page.goto(stack.gateway_url + path)
    run.wait_rendered(page)
    if urlsplit(page.url).path.rstrip("/") != path.rstrip("/"):
        return False
    page.locator(entry.ready).first.wait_for()
    settle(page)
    if entry.then is not None:
        entry.then(page)
        settle(page)
    return True


def test_every_page_has_no_serious_accessibility_violation_at_desktop_and_phone_width(
    browser: Browser, stack: Any, owner: TenantData, run: Run
) -> None:
    violations: list[Violation] = []
    checked = 0
    for label, width in WIDTHS.items():
        context = new_context(browser, width)
        page = run.tab(context)
        try:
            page.goto(f"{stack.gateway_url}/ui/login")
            page.locator(LOGIN_PAGE.ready).wait_for()
            settle(page)
            run.shoot(page, f"{label} {LOGIN_PAGE.name}")
            violations += axe_violations(page, LOGIN_PAGE.name, width)
            violations += reflow_violations(page, LOGIN_PAGE.name, width)
            sign_in(page, stack, owner.token)
            for entry in PAGES:
                if label not in entry.widths:
                    continue
                if not open_page(page, run, stack, owner, entry):
                    pytest.fail(
                        f"{entry.path} ({entry.name}) is not a page of the UI: the router sent it to "
                        f"{page.url}"
                    )
                run.shoot(page, f"{label} {entry.name}")
                violations += axe_violations(page, entry.name, width)
                violations += reflow_violations(page, entry.name, width)
                checked += 1
        finally:
            context.close()

    blocking = [v for v in violations if v.impact in BLOCKING_IMPACTS]
    run.notes.append(f"checked {checked} page views ({len(PAGES) + 1} pages, {len(WIDTHS)} widths)")
    run.notes += [f"minor: {line}" for line in summarised([v for v in violations if v not in blocking])]
    run.check_page_errors()
    assert not blocking, "accessibility violations (serious or critical):\n" + "\n".join(summarised(blocking))


def summarised(violations: list[Violation], detail: bool = True) -> list[str]:
    """One line per page and rule, naming the widths it was found at."""
    groups: dict[tuple[str, str], list[Violation]] = {}
    for violation in violations:
        groups.setdefault((violation.page, violation.rule), []).append(violation)
    lines = []
    for (page, rule), found in groups.items():
        widths = " and ".join(str(v.width) for v in found)
        first = found[0]
        line = f"{page} at {widths} px"
        if detail:
            elements = ", ".join(target[-90:] for target in first.targets[:3])
            line += f": {rule} ({first.impact}), {first.help}; on {elements}: {first.summary[:300]}"
        lines.append(line)
    return lines


# --- tenants ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TenantView:
    """A page the other tenant opens: ``path`` as in :class:`UiPage`; ``refused``: the page must say
    it cannot show that (an alert) since it names the owner's data; ``owner_sees``: the owner's own
    view of it shows the marker (proof the page shows such data at all); ``stranger_sees``: what the
    other tenant's view says instead (its empty state)."""

    name: str
    path: str
    ready: str = "main h1"
    refused: bool = False
    stranger_sees: str = ""
    owner_sees: bool = True


TENANT_VIEWS = [
    TenantView(
        "conversations",
        "/chat",
        ready=".chat-sessions .muted, .session-list a",
        stranger_sees="No conversations yet.",
    ),
    TenantView("the owner's conversation", "/chat/{session}", ready="[role=alert], .message", refused=True),
    TenantView(
        "knowledge bases",
        "/knowledge",
        ready=".kb-list a, .page > section p.muted",
        stranger_sees="No knowledge base yet",
    ),
    TenantView("the owner's knowledge base", "/knowledge/{kb}", ready="[role=alert], table", refused=True),
    TenantView(
        "the owner's retrieval testing",
        "/knowledge/{kb}/search",
        ready="[role=alert]",
        refused=True,
        owner_sees=False,
    ),
    TenantView(
        "the owner's evaluations",
        "/knowledge/{kb}/evaluations",
        ready="[role=alert]",
        refused=True,
        owner_sees=False,
    ),
    TenantView("agents", "/agents"),
    TenantView("models", "/models"),
    TenantView("memory", "/memory"),
]


def test_another_tenant_sees_none_of_the_first_tenants_data_in_the_ui(
    browser: Browser, stack: Any, owner: TenantData, model_server: ScriptedProvider, run: Run
) -> None:
    stranger = new_tenant(stack, model_server, f"stranger{uuid.uuid4().hex[:8]}")
    for who, data in (("owner", owner), ("stranger", stranger)):
        context = new_context(browser)
        page = run.tab(context)
        try:
            sign_in(page, stack, data.token)
            for view in TENANT_VIEWS:
                if who == "owner" and not view.owner_sees:
                    continue
                path = "/ui" + view.path.format(kb=owner.kb_id, session=owner.session_id)
                page.goto(stack.gateway_url + path)
                run.wait_rendered(page)
                if urlsplit(page.url).path != path:
                    pytest.fail(f"{path} ({view.name}) is not a page of the UI: the router sent it to chat")
                page.locator(view.ready).first.wait_for()
                settle(page)
                run.shoot(page, f"{who} {view.name}")
                text = visible_text(page)
                if who == "owner":
                    assert owner.marker in text, f"the owner's {view.name} ({path}) shows none of its data"
                    continue
                assert owner.marker not in text, f"{view.name} ({path}) shows the owner's data:\n{text}"
                if view.refused:
                    expect(page.locator("[role=alert]").first).to_be_visible()
                if view.stranger_sees:
                    expect(page.locator("main")).to_contain_text(view.stranger_sees)
        finally:
            context.close()
    run.check_page_errors()
