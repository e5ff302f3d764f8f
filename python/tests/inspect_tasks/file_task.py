"""An Inspect task of ours for test_inspect.py: each sample asks for a word in answer.txt;
Inspect's own mock model (`mockllm/model`, scripted below) writes the word with Inspect's
`bash` tool in the sample's endless sandbox, and the scorer reads the file back from it.
The last sample's target is another word: it scores incorrect."""

import re

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate, use_tools
from inspect_ai.tool import bash
from inspect_ai.util import sandbox

WORDS = ["apple", "birch", "cedar", "delta", "ember", "fjord"]


def scripted(messages, tools, tool_choice, config):
    """Write the asked word once with the bash tool, then say done. The usage is given: the
    mock model would count tokens with tiktoken, which downloads its tables."""
    if messages[-1].role == "tool":
        output = ModelOutput.from_content(model="mockllm/model", content="Done.")
    else:
        word = re.search(r"word '(\w+)'", messages[-1].text).group(1)
        output = ModelOutput.for_tool_call(model="mockllm/model", tool_name="bash",
                                           tool_arguments={"command": f"printf %s {word} > answer.txt && sleep 1"})
    output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    return output


@scorer(metrics=[accuracy()])
def answer_file():
    async def score(state: TaskState, target: Target) -> Score:
        try:
            got = await sandbox().read_file("answer.txt")
        except FileNotFoundError:
            return Score(value=INCORRECT, explanation="no answer.txt")
        return Score(value=CORRECT if got == target.text else INCORRECT, answer=got)

    return score


@task
def file_task():
    samples = [Sample(id=w, input=f"Write the word '{w}' to answer.txt.", target=w) for w in WORDS]
    samples[-1] = Sample(id=WORDS[-1], input=f"Write the word '{WORDS[-1]}' to answer.txt.", target="other")
    return Task(dataset=samples, solver=[use_tools(bash(timeout=60)), generate()], scorer=answer_file(),
                sandbox="endless", model=get_model("mockllm/model", custom_outputs=scripted))
