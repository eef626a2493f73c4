"""Tools that work with no backend at all."""

from conclave.gateway.builtin.arithmetic import EVALUATE_EXPRESSION
from conclave.gateway.builtin.clock import CURRENT_TIME
from conclave.gateway.builtin.echo import ECHO
from conclave.gateway.builtin.json_query import JSON_QUERY

BUILTIN_TOOLS = (ECHO, CURRENT_TIME, EVALUATE_EXPRESSION, JSON_QUERY)
