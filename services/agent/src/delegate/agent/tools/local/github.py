"""GitHub issues and pull requests of the configured repositories, through the REST API."""

import json
from typing import TYPE_CHECKING, Any

from ..base import FAILED, SIDE_EFFECT, UNAVAILABLE, Tool, ToolError, object_schema
from ..settings import ToolSettings

if TYPE_CHECKING:  # httpx (and, when installed, its CLI's rich and click) loads with a token only
    import httpx

API_VERSION = "2022-11-28"
REPO_PATTERN = r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"


class GitHub:
    def __init__(self, settings: ToolSettings) -> None:
        import httpx

        self.repos = settings.github_repo_list
        self.http = httpx.AsyncClient(
            base_url=settings.github_api_base_url.rstrip("/"),
            headers={
                "Authorization": f"Bearer {settings.github_token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": API_VERSION,
                "User-Agent": "delegate-assistant",
            },
            timeout=httpx.Timeout(20.0),
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    def repo(self, args: dict[str, Any]) -> str:
        repo = args.get("repo") or (self.repos[0] if len(self.repos) == 1 else None)
        if not repo:
            raise ToolError(FAILED, f"say which repository: one of {', '.join(self.repos)}")
        return str(repo)

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            resp = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ToolError(UNAVAILABLE, f"cannot reach the GitHub API: {exc!r}") from exc
        if resp.status_code >= 400:
            raise ToolError(FAILED, _explain(resp))
        return resp.json() if resp.content else None


def _explain(resp: "httpx.Response") -> str:
    try:
        body = resp.json()
    except ValueError:
        body = {}
    message = body.get("message", resp.reason_phrase) if isinstance(body, dict) else resp.reason_phrase
    details = ""
    if isinstance(body, dict) and body.get("errors"):
        details = " (" + "; ".join(str(e.get("message") or e) if isinstance(e, dict) else str(e)
                                  for e in body["errors"]) + ")"
    if resp.status_code == 401:
        return f"GitHub rejected the token (401 {message}); check GITHUB_TOKEN."
    if resp.status_code == 403 and resp.headers.get("x-ratelimit-remaining") == "0":
        return f"GitHub rate limit reached (resets at epoch {resp.headers.get('x-ratelimit-reset', '?')})."
    if resp.status_code == 404:
        return f"GitHub says not found (404 {message}): wrong repository or number, or the token cannot see it."
    return f"GitHub answered {resp.status_code}: {message}{details}"


def _labels(item: dict[str, Any]) -> str:
    names = [lbl["name"] if isinstance(lbl, dict) else str(lbl) for lbl in item.get("labels", [])]
    return f" [{', '.join(names)}]" if names else ""


def _line(item: dict[str, Any]) -> str:
    user = (item.get("user") or {}).get("login", "?")
    return f"#{item['number']} ({item['state']}) {item['title']}{_labels(item)} by {user} — {item.get('html_url', '')}"


def github_tools(settings: ToolSettings) -> tuple[list[Tool], GitHub]:
    gh = GitHub(settings)
    repo_schema: dict[str, Any] = {"type": "string", "description": "owner/name"}
    if gh.repos:
        repo_schema["enum"] = gh.repos
    else:
        repo_schema["pattern"] = REPO_PATTERN
    required_repo = [] if len(gh.repos) == 1 else ["repo"]
    number = {"type": "integer", "minimum": 1}
    state = {"type": "string", "enum": ["open", "closed", "all"], "default": "open"}
    limit = {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}

    async def list_issues(args: dict[str, Any]) -> str:
        repo = gh.repo(args)
        params: dict[str, Any] = {"state": args.get("state", "open"), "per_page": 100}
        if args.get("labels"):
            params["labels"] = ",".join(args["labels"])
        items = await gh.request("GET", f"/repos/{repo}/issues", params=params)
        issues = [i for i in items if "pull_request" not in i][: args.get("limit", 20)]  # the API mixes PRs in
        if not issues:
            return f"No {params['state']} issues in {repo}."
        return f"{len(issues)} issue(s) in {repo}:\n" + "\n".join(_line(i) for i in issues)

    async def get_issue(args: dict[str, Any]) -> str:
        repo = gh.repo(args)
        issue = await gh.request("GET", f"/repos/{repo}/issues/{args['number']}")
        out = {
            "number": issue["number"], "title": issue["title"], "state": issue["state"],
            "author": (issue.get("user") or {}).get("login"), "labels": _labels(issue).strip(" []") or None,
            "url": issue.get("html_url"), "created_at": issue.get("created_at"), "body": issue.get("body"),
            "is_pull_request": "pull_request" in issue,
        }
        if issue.get("comments"):
            comments = await gh.request("GET", f"/repos/{repo}/issues/{args['number']}/comments",
                                        params={"per_page": 30})
            out["comments"] = [{"author": (c.get("user") or {}).get("login"), "at": c.get("created_at"),
                                "body": c.get("body")} for c in comments]
        return json.dumps(out, ensure_ascii=False)

    async def create_issue(args: dict[str, Any]) -> str:
        repo = gh.repo(args)
        body = {k: args[k] for k in ("title", "body", "labels") if k in args}
        issue = await gh.request("POST", f"/repos/{repo}/issues", json=body)
        return f"Created issue #{issue['number']} in {repo}: {issue.get('html_url', '')}"

    async def comment(args: dict[str, Any]) -> str:
        repo = gh.repo(args)
        made = await gh.request("POST", f"/repos/{repo}/issues/{args['number']}/comments", json={"body": args["body"]})
        return f"Commented on {repo}#{args['number']}: {made.get('html_url', '')}"

    async def list_pulls(args: dict[str, Any]) -> str:
        repo = gh.repo(args)
        state_ = args.get("state", "open")
        pulls = await gh.request("GET", f"/repos/{repo}/pulls", params={"state": state_,
                                                                        "per_page": args.get("limit", 20)})
        if not pulls:
            return f"No {state_} pull requests in {repo}."
        lines = []
        for p in pulls:
            head = (p.get("head") or {}).get("ref", "?")
            base = (p.get("base") or {}).get("ref", "?")
            draft = " draft" if p.get("draft") else ""
            lines.append(f"{_line(p)} ({head} → {base}{draft})")
        return f"{len(pulls)} pull request(s) in {repo}:\n" + "\n".join(lines)

    tag = ("local", "github")
    writes = (*tag, SIDE_EFFECT)  # opens or comments: visible to everyone on the repository
    tools = [
        Tool("github_list_issues", "List issues (not pull requests) of a GitHub repository.",
             object_schema({"repo": repo_schema, "state": state, "limit": limit,
                            "labels": {"type": "array", "items": {"type": "string"}}}, required_repo),
             list_issues, tag),
        Tool("github_get_issue", "Read one GitHub issue or pull request with its comments.",
             object_schema({"repo": repo_schema, "number": number}, [*required_repo, "number"]), get_issue, tag),
        Tool("github_create_issue", "Open a new issue in a GitHub repository.",
             object_schema({"repo": repo_schema, "title": {"type": "string", "minLength": 1, "maxLength": 256},
                            "body": {"type": "string", "maxLength": 60_000},
                            "labels": {"type": "array", "items": {"type": "string"}}},
                           [*required_repo, "title"]), create_issue, writes),
        Tool("github_comment", "Comment on a GitHub issue or pull request.",
             object_schema({"repo": repo_schema, "number": number,
                            "body": {"type": "string", "minLength": 1, "maxLength": 60_000}},
                           [*required_repo, "number", "body"]), comment, writes),
        Tool("github_list_pull_requests", "List pull requests of a GitHub repository.",
             object_schema({"repo": repo_schema, "state": state, "limit": limit}, required_repo), list_pulls, tag),
    ]
    return tools, gh
