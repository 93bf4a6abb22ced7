"""The command's allocator settings: when it starts itself again with glibc's tunables, and that it does."""

import os
import platform
import subprocess
import sys

import pytest

from turnformer import cli
from turnformer.allocator import TUNABLES, allocator_environment, started_as


def test_the_tunables_are_added_on_linux_with_glibc_only_and_a_users_are_kept():
    env = {"PATH": "/bin"}
    assert allocator_environment(env, "Linux", "glibc") == {"PATH": "/bin", "GLIBC_TUNABLES": TUNABLES}
    assert env == {"PATH": "/bin"}  # the caller's mapping is not changed
    assert allocator_environment(env, "Darwin", "") is None
    assert allocator_environment(env, "Linux", "") is None  # musl and others: left alone
    assert allocator_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "Linux", "glibc") is None
    assert allocator_environment({"TURNFORMER_ALLOCATOR": " System "}, "Linux", "glibc") is None
    assert allocator_environment({"TURNFORMER_ALLOCATOR": "turnformer"}, "Linux", "glibc")["GLIBC_TUNABLES"] == TUNABLES


def test_an_unknown_allocator_choice_is_named():
    with pytest.raises(ValueError, match=r"TURNFORMER_ALLOCATOR='sytem': expected turnformer .* or system"):
        allocator_environment({"TURNFORMER_ALLOCATOR": "sytem"}, "Linux", "glibc")
    done = subprocess.run([sys.executable, "-m", "turnformer.cli", "--help"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TURNFORMER_ALLOCATOR": "sytem"})
    assert done.returncode == 1 and done.stderr.strip().startswith("error: TURNFORMER_ALLOCATOR='sytem'"), done.stderr


def test_only_the_commands_own_process_is_started_again(tmp_path):
    assert started_as("/usr/local/bin/turnformer", cli.__file__)
    assert started_as(cli.__file__, cli.__file__)  # python -m turnformer.cli
    assert not started_as(str(tmp_path / "my_script.py"), cli.__file__)
    assert not started_as("-c", cli.__file__)


def _environment_seen_by(command: list[str], extra: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "TURNFORMER_ALLOCATOR")}
    done = subprocess.run(command, capture_output=True, text=True, env={**env, **extra}, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="the command changes nothing without glibc (the rule above is tested everywhere)")
def test_the_command_runs_under_the_tunables_once_and_keeps_its_arguments():
    # a process that calls the command's start as `turnformer` would: it is started again, once, with its arguments
    program = ("import os, sys; sys.argv = ['turnformer', *sys.argv[1:]]; "
               "from turnformer.allocator import start_with_allocator_settings as s; s('unused'); "
               "print(sys.argv[1:], os.environ.get('GLIBC_TUNABLES'))")
    seen = _environment_seen_by([sys.executable, "-c", program, "a b", "--x"], {})
    assert seen == f"['a b', '--x'] {TUNABLES}"
    assert _environment_seen_by([sys.executable, "-c", program], {"TURNFORMER_ALLOCATOR": "system"}).endswith(" None")
    users = "glibc.malloc.arena_max=2"
    assert _environment_seen_by([sys.executable, "-c", program], {"GLIBC_TUNABLES": users}).endswith(users)
