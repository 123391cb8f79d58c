"""A local stand-in for the parts of GitHub's REST API the tools use, speaking its real JSON shapes.

Issues and pull requests share one number space per repository, and the issues endpoints list
pull requests too (with a ``pull_request`` key), as on GitHub. Requests need
``Authorization: Bearer <token>`` (or ``token <token>``); every request is recorded.

    gh = GitHubStandin(token="t0k").start()
    gh.add_issue("acme/app", "Crash on start", labels=["bug"])
    ... GITHUB_API_BASE_URL=gh.url ...
    gh.stop()
"""

import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

DOCS = "https://docs.github.com/rest"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class _Repo:
    full_name: str
    items: dict[int, dict[str, Any]] = field(default_factory=dict)  # number -> issue-or-PR record
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


class GitHubStandin:
    def __init__(self, token: str = "test-token", login: str = "owner") -> None:
        self.token = token
        self.login = login
        self.requests: list[Recorded] = []
        self._repos: dict[str, _Repo] = {}
        self._ids = 1000
        self._lock = threading.RLock()  # re-entrant: handlers call the seeding helpers
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> "GitHubStandin":
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                standin._handle(self, "GET")

            def do_POST(self) -> None:
                standin._handle(self, "POST")

            def do_PATCH(self) -> None:
                standin._handle(self, "PATCH")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # ---- seeding ---------------------------------------------------------------------------

    def repo(self, full_name: str) -> _Repo:
        with self._lock:
            return self._repos.setdefault(full_name, _Repo(full_name))

    def add_issue(self, repo: str, title: str, body: str | None = None, labels: list[str] | None = None,
                  state: str = "open") -> dict[str, Any]:
        return self._add(repo, title, body, labels or [], state, pull=None)

    def add_pull(self, repo: str, title: str, head: str = "feature", base: str = "main", draft: bool = False,
                 body: str | None = None) -> dict[str, Any]:
        return self._add(repo, title, body, [], "open", pull={"head": head, "base": base, "draft": draft})

    def add_comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        r = self.repo(repo)
        with self._lock:
            return self._comment(r, number, body)

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        return list(self.repo(repo).comments.get(number, []))

    def issue(self, repo: str, number: int) -> dict[str, Any]:
        return self._issue_json(self.repo(repo), self.repo(repo).items[number])

    # ---- shapes ----------------------------------------------------------------------------

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def _user(self) -> dict[str, Any]:
        return {
            "login": self.login, "id": 1, "node_id": "MDQ6VXNlcjE=",
            "avatar_url": "https://avatars.githubusercontent.com/u/1?v=4", "gravatar_id": "",
            "url": f"{self.url}/users/{self.login}", "html_url": f"https://github.com/{self.login}",
            "type": "User", "site_admin": False,
        }

    def _label(self, name: str) -> dict[str, Any]:
        return {"id": abs(hash(name)) % 10**9, "node_id": "LA_kwDO" + name.encode().hex()[:12], "url": "",
                "name": name, "color": "d73a4a", "default": False, "description": None}

    def _add(self, repo: str, title: str, body: str | None, labels: list[str], state: str,
             pull: dict[str, Any] | None) -> dict[str, Any]:
        r = self.repo(repo)
        with self._lock:
            number = len(r.items) + 1
            now = _now()
            r.items[number] = {"id": self._next_id(), "number": number, "title": title, "body": body,
                               "labels": labels, "state": state, "created_at": now, "updated_at": now,
                               "closed_at": now if state == "closed" else None, "pull": pull}
            return self._issue_json(r, r.items[number])

    def _comment(self, r: _Repo, number: int, body: str) -> dict[str, Any]:
        cid = self._next_id()
        now = _now()
        kind = "pull" if r.items[number]["pull"] else "issues"
        comment = {
            "url": f"{self.url}/repos/{r.full_name}/issues/comments/{cid}",
            "html_url": f"https://github.com/{r.full_name}/{kind}/{number}#issuecomment-{cid}",
            "issue_url": f"{self.url}/repos/{r.full_name}/issues/{number}",
            "id": cid, "node_id": f"IC_kwDO{cid}", "user": self._user(), "created_at": now, "updated_at": now,
            "author_association": "OWNER", "body": body, "performed_via_github_app": None,
            "reactions": {"url": "", "total_count": 0, "+1": 0, "-1": 0, "laugh": 0, "hooray": 0, "confused": 0,
                          "heart": 0, "rocket": 0, "eyes": 0},
        }
        r.comments.setdefault(number, []).append(comment)
        r.items[number]["updated_at"] = now
        return comment

    def _issue_json(self, r: _Repo, item: dict[str, Any]) -> dict[str, Any]:
        base = f"{self.url}/repos/{r.full_name}"
        n = item["number"]
        kind = "pull" if item["pull"] else "issues"
        out: dict[str, Any] = {
            "url": f"{base}/issues/{n}", "repository_url": base, "labels_url": f"{base}/issues/{n}/labels{{/name}}",
            "comments_url": f"{base}/issues/{n}/comments", "events_url": f"{base}/issues/{n}/events",
            "html_url": f"https://github.com/{r.full_name}/{kind}/{n}", "id": item["id"],
            "node_id": f"I_kwDO{item['id']}", "number": n, "title": item["title"], "user": self._user(),
            "labels": [self._label(x) for x in item["labels"]], "state": item["state"], "locked": False,
            "assignee": None, "assignees": [], "milestone": None, "comments": len(r.comments.get(n, [])),
            "created_at": item["created_at"], "updated_at": item["updated_at"], "closed_at": item["closed_at"],
            "author_association": "OWNER", "active_lock_reason": None, "body": item["body"],
            "timeline_url": f"{base}/issues/{n}/timeline", "performed_via_github_app": None,
            "state_reason": "completed" if item["state"] == "closed" else None,
        }
        if item["pull"]:
            out["draft"] = item["pull"]["draft"]
            out["pull_request"] = {"url": f"{base}/pulls/{n}", "html_url": f"https://github.com/{r.full_name}/pull/{n}",
                                   "diff_url": f"https://github.com/{r.full_name}/pull/{n}.diff",
                                   "patch_url": f"https://github.com/{r.full_name}/pull/{n}.patch", "merged_at": None}
        return out

    def _pull_json(self, r: _Repo, item: dict[str, Any]) -> dict[str, Any]:
        base = f"{self.url}/repos/{r.full_name}"
        n = item["number"]
        pull = item["pull"]

        def ref(name: str) -> dict[str, Any]:
            return {"label": f"{self.login}:{name}", "ref": name, "sha": f"{abs(hash((n, name))):040x}"[:40],
                    "user": self._user(), "repo": {"id": 1, "name": r.full_name.split("/")[1],
                                                   "full_name": r.full_name, "private": False}}

        return {
            "url": f"{base}/pulls/{n}", "id": item["id"], "node_id": f"PR_kwDO{item['id']}",
            "html_url": f"https://github.com/{r.full_name}/pull/{n}",
            "diff_url": f"https://github.com/{r.full_name}/pull/{n}.diff",
            "patch_url": f"https://github.com/{r.full_name}/pull/{n}.patch", "issue_url": f"{base}/issues/{n}",
            "number": n, "state": item["state"], "locked": False, "title": item["title"], "user": self._user(),
            "body": item["body"], "created_at": item["created_at"], "updated_at": item["updated_at"],
            "closed_at": item["closed_at"], "merged_at": None, "merge_commit_sha": None, "assignee": None,
            "assignees": [], "requested_reviewers": [], "requested_teams": [],
            "labels": [self._label(x) for x in item["labels"]], "milestone": None, "draft": pull["draft"],
            "head": ref(pull["head"]), "base": ref(pull["base"]), "author_association": "OWNER",
            "auto_merge": None, "active_lock_reason": None,
        }

    # ---- HTTP ------------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(h.path)
        query = parse_qs(parts.query)
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return self._send(h, 400, {"message": "Problems parsing JSON", "documentation_url": DOCS, "status": "400"})
        with self._lock:
            self.requests.append(Recorded(method, parts.path, query, {k: v for k, v in h.headers.items()}, body))
        auth = h.headers.get("Authorization", "")
        if auth not in (f"Bearer {self.token}", f"token {self.token}"):
            return self._send(h, 401, {"message": "Bad credentials", "documentation_url": DOCS, "status": "401"})
        segs = [s for s in parts.path.split("/") if s]
        if len(segs) < 4 or segs[0] != "repos" or f"{segs[1]}/{segs[2]}" not in self._repos:
            return self._not_found(h)
        r = self._repos[f"{segs[1]}/{segs[2]}"]
        rest = segs[3:]
        with self._lock:
            if rest == ["issues"] and method == "GET":
                items = [self._issue_json(r, i) for i in self._filtered(r, query, pulls_only=False)]
                return self._page(h, items, query)
            if rest == ["issues"] and method == "POST":
                if not isinstance(body, dict) or not body.get("title"):
                    return self._send(h, 422, {"message": "Validation Failed", "errors": [
                        {"resource": "Issue", "code": "missing_field", "field": "title"}],
                        "documentation_url": DOCS, "status": "422"})
                made = self.add_issue(r.full_name, body["title"], body.get("body"), body.get("labels"))
                return self._send(h, 201, made)
            if rest == ["pulls"] and method == "GET":
                items = [self._pull_json(r, i) for i in self._filtered(r, query, pulls_only=True)]
                return self._page(h, items, query)
            if len(rest) >= 2 and rest[0] in ("issues", "pulls") and rest[1].isdigit():
                n = int(rest[1])
                item = r.items.get(n)
                if item is None or (rest[0] == "pulls" and not item["pull"]):
                    return self._not_found(h)
                if len(rest) == 2 and method == "GET":
                    return self._send(h, 200, self._issue_json(r, item) if rest[0] == "issues"
                                      else self._pull_json(r, item))
                if rest[2:] == ["comments"] and rest[0] == "issues" and method == "GET":
                    return self._page(h, list(r.comments.get(n, [])), query)
                if rest[2:] == ["comments"] and rest[0] == "issues" and method == "POST":
                    if not isinstance(body, dict) or not body.get("body"):
                        return self._send(h, 422, {"message": "Validation Failed", "errors": [
                            {"resource": "IssueComment", "code": "missing_field", "field": "body"}],
                            "documentation_url": DOCS, "status": "422"})
                    return self._send(h, 201, self._comment(r, n, body["body"]))
        return self._not_found(h)

    def _filtered(self, r: _Repo, query: dict[str, list[str]], *, pulls_only: bool) -> list[dict[str, Any]]:
        state = query.get("state", ["open"])[0]
        labels = [x for x in query.get("labels", [""])[0].split(",") if x]
        items = [i for i in r.items.values() if (i["pull"] is not None or not pulls_only)]
        items = [i for i in items if state == "all" or i["state"] == state]
        items = [i for i in items if all(lbl in i["labels"] for lbl in labels)]
        return sorted(items, key=lambda i: i["number"], reverse=True)  # newest first, as GitHub's default

    def _page(self, h: BaseHTTPRequestHandler, items: list[Any], query: dict[str, list[str]]) -> None:
        per_page = min(int(query.get("per_page", ["30"])[0]), 100)
        page = int(query.get("page", ["1"])[0])
        chunk = items[(page - 1) * per_page: page * per_page]
        headers = {}
        if page * per_page < len(items):
            headers["Link"] = f'<{self.url}{urlsplit(h.path).path}?per_page={per_page}&page={page + 1}>; rel="next"'
        self._send(h, 200, chunk, headers)

    def _not_found(self, h: BaseHTTPRequestHandler) -> None:
        self._send(h, 404, {"message": "Not Found", "documentation_url": DOCS, "status": "404"})

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Length", str(len(data)))
        h.send_header("X-GitHub-Api-Version-Selected", "2022-11-28")
        h.send_header("X-RateLimit-Limit", "5000")
        h.send_header("X-RateLimit-Remaining", "4999")
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
