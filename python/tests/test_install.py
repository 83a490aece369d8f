"""Each extra installed alone in a fresh venv, as a user would, then used once against a server.

The suite's own venv has pytest and its plugins, which bring packages (such
as `packaging`, which kombu's Redis transport imports) that an extra may
forget to declare: only a venv with nothing but the package and one extra
shows that. Needs the package registry (pip resolves the extras' own
dependencies).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest
from servers import Server

PACKAGE = Path(__file__).resolve().parents[1]

# What a user runs first after installing each extra: the README's examples,
# cut to one enqueue and what it must leave on the server.
SMOKE = {
    "": """
        import redis, vtrr
        queue = vtrr.Queue(redis.Redis(port=PORT), NAME)
        assert queue.enqueue("p", "a", b"x")
        lease = queue.lease(1000)
        assert lease is not None and queue.ack(lease) == 1
        # Without their extras, the operator's verbs say what to install.
        import os, subprocess, sys
        cli = os.path.join(os.path.dirname(sys.executable), "vtrr")
        for verb in (["exporter"], ["top", "q"], ["web"]):
            done = subprocess.run([cli, *verb], capture_output=True, text=True)
            hint = f"pip install 'vtrr[{verb[0]}]'"
            assert done.returncode == 2 and done.stderr.count("\\n") == 1, done
            assert hint in done.stderr, done
    """,
    "celery": """
        import redis
        from celery import Celery
        from vtrr.celery import VTRRQueue
        app = Celery("smoke", broker=f"redis://127.0.0.1:{PORT}/1")
        files = VTRRQueue(redis_client=redis.Redis(port=PORT), celery_app=app, name=NAME,
                          celery_queue=NAME + "_celery")
        @files.task()
        def process(self, key):
            return key
        assert len(process.queue(partition_key="u", tasks=[{"args": ["k"]}])) == 1
        assert redis.Redis(port=PORT).execute_command("VTRR.STATS", NAME)
        assert redis.Redis(port=PORT, db=1).llen(NAME + "_celery") == 1, "the trigger was sent"
    """,
    "django": """
        import django
        from django.conf import settings
        settings.configure(
            INSTALLED_APPS=["threadmill", "vtrr.django"],
            TASKS={"default": {"BACKEND": "vtrr.django.VTRRBackend",
                               "OPTIONS": {"url": f"redis://127.0.0.1:{PORT}/0", "prefix": NAME}}},
        )
        django.setup()
        from django.tasks import task
        @task
        def record(label, partition_key=None):
            return label
        import sys
        sys.modules["__main__"].record = record
        result = record.enqueue("x", partition_key="u")
        assert result.id
    """,
    "exporter": """
        import redis, vtrr
        from prometheus_client import generate_latest
        from vtrr.metrics import QueueCollector, registry_for
        client = redis.Redis(port=PORT)
        vtrr.Queue(client, NAME).enqueue("p", "a", b"x")
        text = generate_latest(registry_for(QueueCollector(client, [NAME]))).decode()
        assert 'vtrr_queue_items{queue="' + NAME + '",state="ready"} 1.0' in text, text
    """,
    "top": """
        import asyncio, redis, vtrr
        from textual.widgets import DataTable
        from vtrr.top import TopApp
        queue = vtrr.Queue(redis.Redis(port=PORT), NAME)
        queue.enqueue("alice", "a", b"x")

        async def pause_the_first_tenant():
            app = TopApp(queue, interval_s=0.1)
            async with app.run_test() as pilot:
                while not app.query_one(DataTable).row_count:
                    await pilot.pause(0.05)
                await pilot.press("p")
                while not queue.partition("alice").paused:
                    await pilot.pause(0.05)

        asyncio.run(asyncio.wait_for(pause_the_first_tenant(), 30))
    """,
    "web": """
        import redis, vtrr.web
        app = vtrr.web.create_app(redis.Redis(port=PORT), [NAME])
        assert callable(app)
    """,
}


@pytest.mark.parametrize("extra", sorted(SMOKE))
def test_an_extra_installed_alone_works_at_once(
    extra: str, tmp_path: Path, server: Server, queue_name: str
) -> None:
    # A copy of the source: three builds at once must not share its build/.
    source = tmp_path / "source"
    shutil.copytree(
        PACKAGE,
        source,
        ignore=shutil.ignore_patterns(".venv", "build", "*.egg-info", "__pycache__", ".*_cache"),
    )
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    spec = f"{source}[{extra}]" if extra else str(source)
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", spec],
        check=True,
        timeout=600,
    )
    script = textwrap.dedent(SMOKE[extra]).replace("PORT", str(server.port))
    script = script.replace("NAME", repr(queue_name))
    done = subprocess.run(
        [python, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, f"{extra or 'the package'} alone:\n{done.stderr}"
    assert sys.prefix != str(env)
