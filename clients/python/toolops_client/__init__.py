"""toolops-client: call tools through ToolOps from an OpenAI or Anthropic agent.

    from toolops_client import ToolOps
    with ToolOps("http://127.0.0.1:8000", token).run(budgets={"tool_calls": 20}) as run:
        tools = run.tools(format="openai")          # the definitions to hand the model
        response = openai.chat.completions.create(model=…, messages=messages, tools=tools)
        messages += run.submit(response)            # the tool messages, in the API's shape
"""
from toolops_client._transport import RetryPolicy
from toolops_client.client import (
    FINAL_STATES, AsyncRun, AsyncToolOps, CallOutcome, Confirmations, Invocation, Run, ToolMessages, ToolOps,
)
from toolops_client.errors import (
    AlreadyDecided, APIError, BadRequest, BudgetExhausted, Conflict, ConnectionFailed, DigestMismatch, Forbidden, Gone,
    MalformedRequest, NotFound, PayloadTooLarge, ProposalConflict, RateLimited, RunEnded, SeparationOfDuties,
    ServerError, ServiceUnavailable, ToolOpsError, TooManyRequests, Unauthenticated, Unprocessable,
)
from toolops_client.loop import LoopResult, aloop, loop

__all__ = [
    "APIError", "AlreadyDecided", "AsyncRun", "AsyncToolOps", "BadRequest", "BudgetExhausted", "CallOutcome",
    "Confirmations", "Conflict", "ConnectionFailed", "DigestMismatch", "FINAL_STATES", "Forbidden", "Gone", "Invocation",
    "LoopResult", "MalformedRequest", "NotFound", "PayloadTooLarge", "ProposalConflict", "RateLimited", "RetryPolicy",
    "Run", "RunEnded", "SeparationOfDuties", "ServerError", "ServiceUnavailable", "ToolMessages", "ToolOps",
    "ToolOpsError", "TooManyRequests", "Unauthenticated", "Unprocessable", "aloop", "loop",
]
