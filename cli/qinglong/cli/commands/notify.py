"""`qinglong notify`: a project's notification rules and their delivery history through the user API (rules:
operators and up; reading: every role), and `notify serve`, the dispatcher that delivers them. A rule names the
Project secret that keys it, never a value. Touches the shell (HTTPS), the CA and token files, the profile; `serve`
what its --config file names (the database as ql_notify, the shell's key files, the receivers).
"""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

from qinglong.cli.common import EXIT_UNAVAILABLE, Commands, Failure, api_options, group
from qinglong.cli.connect import UserScope, user_api
from qinglong.cli.printing import table
from qinglong.shell.notify_format import DEFAULT_TEMPLATE
from qinglong.wire.common import SECRET_NAME_PATTERN
from qinglong.wire.notify import CHANNELS, EVENTS, HISTORY_MAX, RULE_NAME_PATTERN


def _rule(text: str) -> str:
    if not re.fullmatch(RULE_NAME_PATTERN, text):
        raise argparse.ArgumentTypeError(f"a rule's name is {RULE_NAME_PATTERN}")
    return text


def _secret(text: str) -> str:
    if not re.fullmatch(SECRET_NAME_PATTERN, text):
        raise argparse.ArgumentTypeError(f"a secret's name is an environment-variable name ({SECRET_NAME_PATTERN})")
    return text


def _events(text: str) -> tuple[str, ...]:
    given = tuple(e.strip() for e in text.split(",") if e.strip())
    unknown = [e for e in given if e not in EVENTS]
    if not given or unknown:
        raise argparse.ArgumentTypeError(f"events are a comma-separated list of {', '.join(EVENTS)}")
    return tuple(dict.fromkeys(given))


def _limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= HISTORY_MAX:
        raise argparse.ArgumentTypeError(f"a whole number from 1 to {HISTORY_MAX}")
    return int(text)


def _when(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000))


def add_rule(args: argparse.Namespace) -> int:
    if (args.channel == "webhook") != (args.url is not None):
        raise Failure("a webhook rule needs --url; a wecom rule takes none (the dispatcher's robot endpoint)")
    if args.template is not None and args.channel != "wecom":
        raise Failure("--template is for a chat channel (wecom)")
    fields: dict[str, Any] = {"events": list(args.events), "channel": args.channel, "url": args.url,
                              "secretName": args.secret, "template": args.template}  # fmt: skip
    scope = UserScope(user_api(args), args.project)
    result = scope.call(f"notify rule add {args.name} in project {args.project}",
                        lambda p: scope.api.set_notify_rule(p, args.name, fields),
                        f"no secret {args.secret} in project {args.project} (`secret list` lists them)")  # fmt: skip
    print(json.dumps(result, indent=2) if args.json else f"rule {result['name']}: {result['status']}")
    return 0


def remove_rule(args: argparse.Namespace) -> int:
    scope = UserScope(user_api(args), args.project)
    result = scope.call(f"notify rule remove {args.name} in project {args.project}",
                        lambda p: scope.api.remove_notify_rule(p, args.name),
                        f"no rule {args.name} in project {args.project} (`notify rule list` lists them)")  # fmt: skip
    text = f"rule {result['name']}: removed ({result['dropped']} pending notifications dropped)"
    print(json.dumps(result, indent=2) if args.json else text)
    return 0


def list_rules(args: argparse.Namespace) -> int:
    scope = UserScope(user_api(args), args.project)
    listed = scope.call(f"notify rule list of project {args.project}", lambda p: scope.api.notify_rules(p))
    rows = [(r["name"], ",".join(r["events"]), r["channel"], r.get("url", "-"), r["secretName"], r["pending"])
            for r in listed["rules"]]  # fmt: skip
    print(json.dumps(listed, indent=2) if args.json
          else table(("NAME", "EVENTS", "CHANNEL", "URL", "SECRET", "PENDING"), rows))  # fmt: skip
    return 0


def deliveries(args: argparse.Namespace) -> int:
    query = urllib.parse.urlencode({k: v for k, v in (("rule", args.rule), ("limit", args.limit)) if v is not None})
    scope = UserScope(user_api(args), args.project)
    listed = scope.call(f"notify deliveries of project {args.project}",
                        lambda p: scope.api.notify_deliveries(p, query))  # fmt: skip
    rows = []
    for n in listed["notifications"]:
        last = n["deliveries"][-1] if n["deliveries"] else {}
        outcome = (
            "-" if not last else str(last.get("statusCode", "")) + (f" {last['error']}" if "error" in last else "")
        )
        rows.append((n["id"][:8], n["rule"], n["kind"], n["state"], n["attempts"], outcome.strip(),
                     _when(n["createdAtMs"]), _when(n.get("nextAttemptAtMs"))))  # fmt: skip
    header = ("ID", "RULE", "EVENT", "STATE", "ATTEMPTS", "LAST", "CREATED (UTC)", "NEXT ATTEMPT (UTC)")
    print(json.dumps(listed, indent=2) if args.json else table(header, rows))
    return 0


def serve(args: argparse.Namespace) -> int:
    from qinglong.shell.config import ConfigError
    from qinglong.shell.notify import main as notify_main

    try:
        return notify_main(args.config)
    except ConfigError as exc:
        raise Failure(str(exc)) from None
    except OSError as exc:
        raise Failure(f"cannot start: {exc.strerror or exc}", EXIT_UNAVAILABLE) from None


def register(top: Commands) -> None:
    notify = group(top, "notify", "notifications: rules, their delivery history, and the dispatcher")
    rule = group(notify, "rule", "a project's notification rules, through the user API")
    p = rule.add_parser("add", help="create or replace a rule: its events, channel and the secret that keys it")
    api_options(p)
    p.add_argument("name", type=_rule, metavar="NAME", help=f"the rule's name: {RULE_NAME_PATTERN}")
    p.add_argument("--events", type=_events, required=True, metavar="E1,E2",
                   help="comma-separated: " + ", ".join(EVENTS))  # fmt: skip
    p.add_argument("--channel", choices=CHANNELS, default="webhook", help="webhook (signed JSON POST, default) or "
                   "wecom (a WeCom group robot)")  # fmt: skip
    p.add_argument(
        "--url", help="the webhook's http(s) URL (webhook only, and then required; default: none; no credential in it)"
    )
    p.add_argument("--secret", type=_secret, required=True, metavar="NAME",
                   help="the Project secret that keys it: the webhook's HMAC key, the robot's key")  # fmt: skip
    p.add_argument("--template", help="wecom only: the message text, with {event} {project} {task} {run} {reason} "
                   "{attempt} {worker} {at} (default: " + DEFAULT_TEMPLATE.replace("%", "%%") + ")")  # fmt: skip
    p.set_defaults(handler=add_rule)
    p = rule.add_parser("list", help="a project's rules (names of secrets, never a value)")
    api_options(p)
    p.set_defaults(handler=list_rules)
    p = rule.add_parser("remove", help="remove a rule; its pending notifications are dropped")
    api_options(p)
    p.add_argument("name", type=_rule, metavar="NAME", help="the rule's name")
    p.set_defaults(handler=remove_rule)
    p = notify.add_parser("deliveries", help="the latest notifications, newest first, with their attempts")
    api_options(p)
    p.add_argument(
        "--rule", type=_rule, metavar="NAME", help="only this rule's (a removed one's too; default: every rule's)"
    )
    p.add_argument("--limit", type=_limit, metavar="N", help="how many (1..200, default 50)")
    p.set_defaults(handler=deliveries)
    p = notify.add_parser("serve", help="deliver notifications (a process of its own, logged in as ql_notify)")
    p.add_argument("--config", type=Path, required=True, help="TOML file (see qinglong.shell.notify)")
    p.set_defaults(handler=serve)
