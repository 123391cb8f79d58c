"""What the tests' fork server imports once (``tests.support.forked``): every service's code as a
host imports it, and what the services import only after their start, so a forked child imports
none of it again."""

import gc

from delegate.host.catalog import parse
from delegate.host.hosted import import_service
from delegate.runtime.openai_client import import_sdk

gc.disable()  # as a host's __main__ does while importing: nothing here is garbage
for _name in parse("all,openai-standin"):
    import_service(_name)
import_sdk()
for _module in ("twilio.twiml", "twilio.rest", "jsonschema", "markdown_it", "html2text", "py_vapid"):
    __import__(_module)
# Every object so far lives as long as the children: frozen, no collection scans it again (nor
# touches its pages, which the children share with this process until they write them).
gc.freeze()
gc.enable()
