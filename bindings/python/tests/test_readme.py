"""The package README's examples run as shown: the completion-notice recipe for a host without
an adapter prints what the README says, and the adapters' snippets make their tools."""

import os
import subprocess
import sys
import unittest

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")


def section(heading: str) -> str:
    with open(README) as f:
        text = f.read()
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def block(text: str, lang: str) -> str:
    return text.split(f"```{lang}\n", 1)[1].split("```", 1)[0]


def run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError(f"the example failed ({out.returncode}):\n{out.stderr}")
    return out.stdout


class Readme(unittest.TestCase):
    def test_the_notice_recipe_prints_what_the_readme_says(self):
        notices = section("Completion notices")
        self.assertEqual(run(block(notices, "python")), block(notices, "text"))

    def test_the_adapters_snippets_make_their_tools(self):
        for heading, made in (("LangChain", "agent_tools"), ("OpenAI Agents SDK", "agent.tools")):
            code = block(section(heading), "python") + f"\nprint([t.name for t in {made}])\ntools.close()\n"
            self.assertEqual(run(code), "['bash', 'bash_output', 'bash_kill']\n", heading)


if __name__ == "__main__":
    unittest.main()
