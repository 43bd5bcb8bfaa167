"""The verifier's own cost: synchronous CPU work, so instruction counts and A/B rounds can gate it."""

from mathenv.verifier import AnswerVerifier

RESPONSES = [f"Step 1: {i} + {i} = {2 * i}. So the answer is {2 * i}." for i in range(200)]
ROWS = [{"expected_answer": 2 * i} for i in range(200)]


def verify_all(verifier):
    return sum(verifier.verify(row, text).reward for row, text in zip(ROWS, RESPONSES, strict=True))


def test_verify(gymbench):
    gymbench.measure(verify_all, AnswerVerifier())
