"""Contacts from a real Radicale address book (CardDAV) become people in memory (issue #30): the
pollers read the cards and publish ``person.imported``; the memory service resolves who each
card is; the owner sees them at GET /api/people. An edited card updates its person, and a
re-sync makes nobody new."""

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.messages import QueryRequest
from delegate.contracts.people import PeopleCommand
from delegate.runtime.bus import Bus
from tests.support.radicale import PASSWORD, USER, Owner, RadicaleServer
from tests.support.standin import StandinProcess
from tests.support.system import System, module_system, owner_http, probe_bus
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

BOOK = f"{USER}/contacts/"
MKCOL = ('<?xml version="1.0"?><d:mkcol xmlns:d="DAV:" xmlns:c="urn:ietf:params:xml:ns:carddav"><d:set><d:prop>'
         "<d:resourcetype><d:collection/><c:addressbook/></d:resourcetype><d:displayname>Contacts</d:displayname>"
         "</d:prop></d:set></d:mkcol>")


def vcard(uid: str, fn: str, n: str, tel: str, email: str, bday: str, nickname: str = "") -> str:
    lines = ["BEGIN:VCARD", "VERSION:3.0", f"UID:{uid}", f"FN:{fn}", f"N:{n}", f"TEL;TYPE=CELL:{tel}",
             f"EMAIL:{email}", f"BDAY:{bday}", *([f"NICKNAME:{nickname}"] if nickname else []), "END:VCARD"]
    return "\r\n".join(lines) + "\r\n"


def put(radicale: RadicaleServer, name: str, body: str) -> None:
    """The owner's phone stores a card, straight on Radicale."""
    r = httpx.put(radicale.direct_url + BOOK + name, content=body, auth=(USER, PASSWORD),
                  headers={"Content-Type": "text/vcard; charset=utf-8"}, timeout=10)
    assert r.status_code in (201, 204), r.text


@pytest.fixture(scope="module")
def radicale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RadicaleServer]:
    server = RadicaleServer(tmp_path_factory.mktemp("radicale")).start()
    Owner(server.direct_url).close()  # the principal and its calendar
    r = httpx.request("MKCOL", server.direct_url + BOOK, content=MKCOL, auth=(USER, PASSWORD), timeout=10)
    assert r.status_code == 201, r.text
    put(server, "ana.vcf", vcard("ana-1", "Ana Costa", "Costa;Ana;;;", "+15550002222", "ana@example.org",
                                 "1990-04-12", "Aninha"))  # one: Radicale keeps a NICKNAME's first item only
    put(server, "bruno.vcf", vcard("bruno-1", "Bruno Lima", "Lima;Bruno;;;", "+15550003333", "bruno@example.org",
                                   "--07-30"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, radicale: RadicaleServer, request: pytest.FixtureRequest,
    module_standin: StandinProcess,
) -> Iterator[System]:
    env = {
        "CALDAV_URL": radicale.url, "CALDAV_USERNAME": USER, "CALDAV_PASSWORD": PASSWORD,
        "CALENDAR_POLL_S": "5", "CONTACTS_POLL_S": "0.5", "MEMORY_RESYNC_SECONDS": "1",
        "OPENAI_API_KEY": "offline-standin", "OPENAI_BASE_URL": module_standin.base_url,
    }
    with module_system(tmp_path_factory.mktemp("contacts"), request, "ledger", "memory", "pollers", "gateway",
                       env=env, separate=("pollers",), extra_log=module_standin.log_text) as system:
        yield system


@pytest.fixture
async def http(running: System) -> AsyncIterator[httpx.AsyncClient]:
    async with owner_http(running, timeout=20) as client:
        yield client


@pytest.fixture
async def bus(running: System) -> AsyncIterator[Bus]:
    async with probe_bus(running) as bus:
        yield bus


async def people(http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    r = await http.get("/api/people")
    assert r.status_code == 200, r.text
    found: dict[str, dict[str, Any]] = {}
    for summary in r.json()["people"]:
        detail = await http.get(f"/api/people/{summary['id']}")
        assert detail.status_code == 200, detail.text
        found[summary["name"]] = detail.json()["person"]
    return found


def dates(person: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d["label"], d["date"]) for d in person["dates"]]


async def imports(bus: Bus) -> int:
    reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["person.imported"], limit=1000))
    return len(reply.events)


async def date_offers(bus: Bus) -> list[Any]:
    reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["inner.signal"], limit=1000))
    return [e for e in reply.events if e.payload["signal_kind"] == "person.dates"]


async def _two(bus: Bus) -> list[Any] | None:
    found = await date_offers(bus)
    return found if len(found) >= 2 else None


async def test_cards_become_people_an_edit_updates_and_a_resync_adds_nobody(
    radicale: RadicaleServer, http: httpx.AsyncClient, bus: Bus
) -> None:
    async def both() -> dict[str, dict[str, Any]] | None:
        found = await people(http)
        return found if {"Ana Costa", "Bruno Lima"} <= set(found) else None

    found = await eventually(both, "two people from the two cards", timeout=60)
    assert len(found) == 2
    ana, bruno = found["Ana Costa"], found["Bruno Lima"]
    assert ana["phones"] == ["+15550002222"] and ana["emails"] == ["ana@example.org"]
    assert ("birthday", "1990-04-12") in dates(ana)
    assert "Aninha" in ana["aliases"]
    assert bruno["phones"] == ["+15550003333"] and bruno["emails"] == ["bruno@example.org"]
    assert ("birthday", "07-30") in dates(bruno)

    # the owner's phone edits Ana's card: a new number, the old one gone
    put(radicale, "ana.vcf", vcard("ana-1", "Ana Costa", "Costa;Ana;;;", "+15550004444", "ana@example.org",
                                   "1990-04-12", "Aninha"))

    async def edited() -> dict[str, Any] | None:
        now = await people(http)
        return now if now.get("Ana Costa", {}).get("phones") == ["+15550004444"] else None

    now = await eventually(edited, "Ana's new number from her edited card", timeout=60)
    assert set(now) == {"Ana Costa", "Bruno Lima"}
    assert now["Ana Costa"]["id"] == ana["id"]
    assert await imports(bus) == 3  # two cards, one edit

    # more sync passes (every 0.5 s) find nothing new: no event, no person
    passes_before = await imports(bus)

    async def settled() -> bool | None:
        r = await http.get("/api/people")
        return True if len(r.json()["people"]) == 2 and await imports(bus) == passes_before else None

    await eventually(settled, "still two people and three imports")
    # the memory service offered the two imported birthdays once, together (not again on the edit)
    [offer] = await eventually(lambda: date_offers(bus), "the one offer of the imported birthdays")
    assert offer.payload["signal"]["payload"]["count"] == 2
    assert [d["name"] for d in offer.payload["signal"]["payload"]["dates"]] == ["Ana Costa", "Bruno Lima"]


async def test_a_pollers_crash_before_it_kept_the_etags_imports_nothing_twice(
    running: System, http: httpx.AsyncClient, bus: Bus
) -> None:
    """SIGKILL, and the ETags file lost as if the crash came between the publish and its write:
    the restarted sync publishes every card again under the same event ids, which the ledger
    stores once; no new person either."""
    etags = running.runtime / "contacts" / "etags.json"

    async def kept() -> bool:
        return etags.exists()

    await eventually(kept, "the contacts sync to keep its ETags")
    before = await imports(bus)
    names = set(await people(http))
    running.kill("pollers")
    etags.unlink()
    running.restart("pollers")
    await eventually(kept, "the restarted sync to read every card again", timeout=60)
    assert await imports(bus) == before
    assert set(await people(http)) == names


async def test_a_card_deleted_on_the_server_leaves_its_person_no_longer_in_contacts(
    radicale: RadicaleServer, http: httpx.AsyncClient, bus: Bus
) -> None:
    """Bruno's card is deleted on the phone: he stays a person (what turns said of him stays),
    shown as no longer in contacts, and his card's number and address identify him no more."""
    async def listed() -> dict[str, Any] | None:
        bruno = (await people(http)).get("Bruno Lima")
        return bruno if bruno and bruno["contacts"] == "listed" else None

    bruno = await eventually(listed, "Bruno from his card", timeout=60)
    r = httpx.delete(radicale.direct_url + BOOK + "bruno.vcf", auth=(USER, PASSWORD), timeout=10)
    assert r.status_code in (200, 204), r.text

    async def unlisted() -> dict[str, Any] | None:
        now = (await people(http)).get("Bruno Lima")
        return now if now and now["contacts"] == "unlisted" else None

    gone = await eventually(unlisted, "Bruno no longer in contacts", timeout=60)
    assert gone["id"] == bruno["id"]
    assert gone["phones"] == [] and gone["emails"] == [] and gone["dates"] == []
    assert (await people(http))["Ana Costa"]["contacts"] == "listed"
    match = await bus.request(topics.MEMORY_PEOPLE, PeopleCommand(op="match", phones=["+15550003333"]))
    assert match.person is None, "his old number no longer says who a sender is"

    async def recorded() -> list[Any] | None:
        found = (await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["person.unlisted"], limit=10))).events
        return found or None

    [event] = await eventually(recorded, "the person.unlisted event")
    assert event.payload["contact_uid"] == "bruno-1"
    synced = (await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["contacts.synced"], limit=100))).events
    assert any(e.payload["unlisted"] == 1 for e in synced)

    # later passes unlist nobody again: a card added after is imported, and still one unlisting
    put(radicale, "carla.vcf", vcard("carla-1", "Carla Dias", "Dias;Carla;;;", "+15550005555", "carla@example.org",
                                     "--01-02"))

    async def carla() -> dict[str, Any] | None:
        return (await people(http)).get("Carla Dias")

    await eventually(carla, "Carla from a card added after", timeout=60)
    again = (await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["person.unlisted"], limit=10))).events
    assert len(again) == 1
    assert (await people(http))["Bruno Lima"]["contacts"] == "unlisted"
    offers = await eventually(lambda: _two(bus), "Carla's birthday offered alone")
    assert [d["name"] for d in offers[1].payload["signal"]["payload"]["dates"]] == ["Carla Dias"]
