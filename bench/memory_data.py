"""LoCoMo for bench/memory.py: the turns as import lines, the questions with their evidence, filler.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024; snap-research/LoCoMo) is licensed CC BY-NC 4.0. It is never copied into this
repository: it is read from ``--data`` / ``LOCOMO_DIR``, by default ``../shared/data/locomo``
beside the repository root.
"""

import json
import os
import random
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT.parent / "shared" / "data" / "locomo"

# Turns of one session are this far apart: the dataset gives one time per session, and the
# import keeps the order of a conversation by its timestamps.
TURN_SPACING = timedelta(seconds=5)
SESSION_KEY = re.compile(r"session_(\d+)$")
DIA_ID = re.compile(r"D(\d+):(\d+)")


@dataclass(frozen=True)
class Turn:
    sample_id: str
    session: int
    dia_id: str
    speaker: str
    role: str  # speaker_a -> "user", speaker_b -> "assistant"
    text: str
    ts: datetime

    @property
    def ref(self) -> str:
        # dia_ids restart in every conversation ("D1:3" is in all of them) and the search is
        # global, so the ref names the conversation too: a hit in another conversation is a miss.
        return f"{self.sample_id}:{self.dia_id}"

    def line(self) -> dict[str, str]:
        return {
            "ts": self.ts.isoformat(),
            "role": self.role,
            "text": self.text,
            "speaker": self.speaker,
            "conversation": f"{self.sample_id}/session_{self.session}",
            "ref": self.ref,
        }


@dataclass(frozen=True)
class Question:
    sample_id: str
    question: str
    category: int
    answer: str
    evidence: frozenset[str]  # refs (sample_id:dia_id)


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def data_dir(given: str | None) -> Path:
    return Path(given or os.environ.get("LOCOMO_DIR") or DEFAULT_DIR)


def session_time(text: str) -> datetime:
    """``1:56 pm on 8 May, 2023`` (the dataset gives no zone: taken as UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def turn_text(raw: dict[str, object]) -> str:
    # A shared photo is only a caption in the dataset; several questions are about it, so it is
    # part of the text that is imported (and that the baselines index: the same text for all).
    text = str(raw.get("text", "")).strip()
    caption = raw.get("blip_caption")
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return text


def evidence_refs(sample_id: str, evidence: list[str]) -> frozenset[str]:
    """The dataset's evidence ids as refs; a few are malformed ("D8:6; D9:17", "D:11:26", "D")."""
    refs = set()
    for item in evidence:
        for match in DIA_ID.finditer(item.replace("D:", "D")):
            refs.add(f"{sample_id}:D{int(match.group(1))}:{int(match.group(2))}")
    return frozenset(refs)


def load(directory: Path) -> list[Conversation]:
    files = sorted(directory.glob("locomo*.json"))
    if not files:
        raise SystemExit(f"no locomo*.json in {directory} (give --data or LOCOMO_DIR)")
    conversations = []
    for item in json.loads(files[0].read_text()):
        conv = Conversation(item["sample_id"])
        body = item["conversation"]
        roles = {body["speaker_a"]: "user", body["speaker_b"]: "assistant"}
        sessions = sorted(int(m.group(1)) for key in body if (m := SESSION_KEY.match(key)))
        for n in sessions:
            start = session_time(body[f"session_{n}_date_time"])
            for i, raw in enumerate(body[f"session_{n}"]):
                conv.turns.append(Turn(
                    conv.sample_id, n, raw["dia_id"], raw["speaker"], roles.get(raw["speaker"], "user"),
                    turn_text(raw), start + i * TURN_SPACING,
                ))
        for qa in item["qa"]:
            if qa["category"] == 5:  # adversarial, no answer: outside the recall figures
                continue
            conv.questions.append(Question(
                conv.sample_id, qa["question"], qa["category"], str(qa.get("answer", "")),
                evidence_refs(conv.sample_id, qa.get("evidence", [])),
            ))
        conversations.append(conv)
    return conversations


def ndjson(lines: list[dict[str, str]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


WORD = re.compile(r"[A-Za-z']+")


def filler(turns: list[Turn], n: int, seed: int, start: datetime) -> list[dict[str, str]]:
    """``n`` synthetic messages whose words are drawn from the LoCoMo turns at their real
    frequencies (so the questions' terms have realistic posting lists), seeded, none with a ref."""
    rng = random.Random(seed)
    words = [w.lower() for t in turns for w in WORD.findall(t.text)]
    speakers = ["Alex", "Sam", "Robin", "Kim"]
    lines = []
    for i in range(n):
        text = " ".join(rng.choices(words, k=rng.randint(6, 30))).capitalize() + "."
        speaker = speakers[i % len(speakers)]
        lines.append({
            "ts": (start + timedelta(seconds=i)).isoformat(),
            "role": "user" if i % 2 == 0 else "assistant",
            "text": text,
            "speaker": speaker,
            # one imported conversation per 500 lines: paging and spans stay ordinary
            "conversation": f"filler-{seed}-{i // 500}",
        })
    return lines
