"""Two ``logitlab build`` processes of the same sources and flags at once: one builds, the other waits for it.

The tree is a real CMake project with the two files that make a llama.cpp tree (``CMakeLists.txt``,
``include/llama.h``) and a ``llama`` target whose one generated source takes 2 s and counts its runs in a file
outside the tree (a file inside it would change the source digest, and so the key).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CMAKE = """cmake_minimum_required(VERSION 3.14)
project(fake C)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/slow.c COMMAND sh ${CMAKE_SOURCE_DIR}/slow.sh ${CMAKE_BINARY_DIR}/slow.c)
add_library(llama SHARED ${CMAKE_BINARY_DIR}/slow.c)
"""
SLOW = """echo built >> "$FAKE_BUILD_COUNT"
sleep 2
echo 'int llama_fake(void) { return 1; }' > "$1"
"""


def test_a_second_build_of_the_same_key_waits_and_builds_nothing(tmp_path):
    tree = tmp_path / "tree"
    (tree / "include").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(CMAKE)
    (tree / "slow.sh").write_text(SLOW)
    (tree / "include" / "llama.h").write_text("int llama_fake(void);\n")
    count = tmp_path / "count"
    env = {**os.environ, "LOGITLAB_CACHE": str(tmp_path / "cache"), "FAKE_BUILD_COUNT": str(count)}
    command = [sys.executable, "-m", "logitlab", "build", "llamacpp", str(tree)]
    first = subprocess.Popen([*command, "-q", "--json", "-"], env=env, stdout=subprocess.PIPE, text=True)
    for _ in range(1000):  # the first one is compiling (its lock is held) before the second starts
        if count.exists():
            break
        time.sleep(0.01)
    assert count.exists(), "the first build never started"
    second = subprocess.run([*command, "--json", str(tmp_path / "second.json")], env=env, capture_output=True,
                            text=True, timeout=120)
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    built, waited = json.loads(out), json.loads((tmp_path / "second.json").read_text())
    assert "built by another process meanwhile (this one waited for it)" in second.stderr, second.stderr
    assert count.read_text() == "built\n"  # compiled once
    assert built["cached"] is False and built["waited"] is False
    assert waited["cached"] is True and waited["waited"] is True and waited["folder"] == built["folder"]
    assert (tmp_path / "cache" / "llama-builds" / built["key"] / "lib" / "libllama.so").is_file()
    # a third, alone: a plain cache hit
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stderr.strip().endswith(": cached, built before"), again.stderr
