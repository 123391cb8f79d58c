"""The offline demo's continuity capsule: the facts the person stated, not an echo.

The inner plane asks for the capsule with instructions naming the sections it wants
("- Established facts (about ...)") and an input holding the previous capsule and the
new turns (`facts.turn_lines`). Each statement of the person's goes under the section
it fits, quoted; the previous capsule's bullets are folded in and duplicates dropped.
Deterministic, so tests and the demo see the same capsule for the same turns.
"""

import re
from dataclasses import dataclass, field

from delegate.openai_standin import facts
from delegate.openai_standin.clip import escape, shorten

MARK = "continuity capsule"  # what the capsule writer's instructions say
_TURNS_HEADER = re.compile(r"^TURNS SINCE THE PREVIOUS CAPSULE[^\n]*:\s*$", re.MULTILINE)
_PREVIOUS_HEADER = "PREVIOUS CAPSULE:"
_SECTION = re.compile(r"^\s*[-*]\s+(?P<name>[A-Z][^()\n]*?)\s*(?:\(.*\))?\s*$")

FACTS, COMMITMENTS, UNRESOLVED, CORRECTIONS, PREFERENCES, CHANNELS = (
    "Established facts",
    "Commitments",
    "Unresolved work",
    "Corrections",
    "Preferences",
    "Cross-channel context",
)
DEFAULT_SECTIONS = (FACTS, COMMITMENTS, UNRESOLVED, CORRECTIONS, PREFERENCES, CHANNELS)
SECTION_OF = {
    facts.FACT: FACTS,
    facts.PREFERENCE: PREFERENCES,
    facts.COMMITMENT: COMMITMENTS,
    facts.CORRECTION: CORRECTIONS,
}
CHANNEL_NAMES = {
    "text": "text chat",
    "browser_voice": "browser voice",
    "phone": "phone",
    "sms": "SMS",
    "email": "email",
}
NOTHING = "Nothing stated yet."  # the one bullet of a capsule with no facts; not a fact itself
PER_SECTION = 12  # newest kept: the capsule stays "a few terse bullet points"
MAX_CHARS = 2400  # about the 400 words the prompt allows


@dataclass
class Capsule:
    sections: list[str]
    bullets: dict[str, list[str]] = field(default_factory=dict)

    def add(self, section: str, bullet: str) -> None:
        kept = self.bullets.setdefault(self._section(section), [])
        same = facts.key(bullet)
        # The newest wording wins; an older duplicate moves out of the way.
        kept[:] = [b for b in kept if facts.key(b) != same]
        kept.append(bullet)

    def render(self) -> str:
        blocks = []
        for name in self.sections:
            bullets = self.bullets.get(name, [])[-PER_SECTION:]
            if bullets:  # the prompt: omit a section only if it is empty
                blocks.append(f"**{name}**\n" + "\n".join(f"- {b}" for b in bullets))
        if not any(bullets for name, bullets in self.bullets.items() if name != self._section(CHANNELS)):
            blocks.insert(0, f"**{self._section(FACTS)}**\n- {NOTHING}")
        return shorten("\n\n".join(blocks), MAX_CHARS)

    def _section(self, wanted: str) -> str:
        for name in self.sections:
            if name.lower() == wanted.lower():
                return name
        # A section the prompt does not ask for goes under the first one it does.
        return self.sections[0] if self.sections else wanted


def is_capsule_request(instructions: str, text: str) -> bool:
    return MARK in instructions.lower() and _TURNS_HEADER.search(text) is not None


def write(instructions: str, text: str) -> str:
    capsule = Capsule(sections=requested_sections(instructions))
    previous, turns = split_input(text)
    for section, bullet in previous_bullets(previous, capsule.sections):
        capsule.add(section, bullet)
    channels: list[str] = []
    for turn in turns:
        if turn.role != "user":
            continue
        if turn.channel not in channels and turn.channel in CHANNEL_NAMES:
            channels.append(turn.channel)
        for statement in facts.stated(turn.text):
            capsule.add(SECTION_OF[statement.kind], f"“{escape(statement.text)}”")
    for channel in channels:
        capsule.add(CHANNELS, f"The person wrote by {CHANNEL_NAMES[channel]}.")
    return capsule.render()


def requested_sections(instructions: str) -> list[str]:
    """The section names the instructions list as bullets, in their order."""
    names = [m.group("name").strip() for line in instructions.splitlines() if (m := _SECTION.match(line))]
    return names or list(DEFAULT_SECTIONS)


def split_input(text: str) -> tuple[str, list[facts.TurnLine]]:
    header = _TURNS_HEADER.search(text)
    if header is None:
        return "", []
    previous = text[: header.start()].strip().removeprefix(_PREVIOUS_HEADER).strip()
    if previous.startswith("(") and previous.endswith(")"):  # "(none yet)"
        previous = ""
    return previous, facts.turn_lines(text[header.end() :])


def previous_bullets(previous: str, sections: list[str]) -> list[tuple[str, str]]:
    """(section, bullet) pairs of an earlier capsule, whoever wrote it."""
    found: list[tuple[str, str]] = []
    current = sections[0] if sections else FACTS
    for line in previous.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(("- ", "* ")):
            if stripped[2:].strip() != NOTHING:
                found.append((current, stripped[2:].strip()))
            continue
        heading = stripped.strip("#*: ").strip()
        match = next((s for s in sections if heading.lower().startswith(s.lower())), None)
        if match is not None:
            current = match
        else:
            found.append((current, stripped))  # a capsule in prose: keep its lines
    return found
