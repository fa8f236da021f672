"""The demo's conversations: seed 000's ten-turn OA conversation (and three follow-ups) and a turn with tool calls."""

from __future__ import annotations

from typing import Any

OA_SYSTEM_PROMPT = "你是公司内部知识库助手，回答 OA 系统、考勤和审批相关的问题，回答要简洁准确。"

# (user, assistant) per turn; turn 10 is the seed's "如果它超过三天没审批怎么办？"
OA_TURNS: tuple[tuple[str, str], ...] = (
    (
        "OA 系统怎么提交加班申请？我是外包员工。",
        "登录 OA → 考勤管理 → 加班申请，填写日期、时长和事由后提交。外包员工还要选择所属供应商，由驻场负责人先确认。",
    ),
    (
        "提交之后审批流程是怎样的？",
        "正式员工：直属主管 → 部门经理。外包员工多一级：驻场负责人 → 直属主管 → 供应商管理员。",
    ),
    ("加班审批通过后怎么看记录？", "您可以在 OA 系统的“我的申请”里按状态筛选“已通过”，考勤月报里也有汇总。"),
    (
        "那调休假怎么申请？",
        "调休假申请的流程是：考勤管理 → 请假申请 → 类型选“调休”，系统自动扣减已审批的加班时长。",
    ),
    ("调休有有效期吗？", "加班产生的调休额度有效期为 6 个月，过期清零；外包员工以供应商合同约定为准。"),
    (
        "周末加班和工作日加班算法一样吗？",
        "不一样：工作日加班按 1:1 折算调休，周末按 1:1.5；法定节假日加班发加班费，不转调休。",
    ),
    ("加班申请可以事后补吗？", "可以，加班结束后 3 个工作日内补提；超过 3 天需要部门经理特批。"),
    ("补提的申请需要附什么材料？", "附上门禁记录或工作成果截图；外包员工还需要驻场负责人签字的确认单。"),
    ("审批人出差了怎么办？", "审批人可以在 OA 里设置代理人；没设代理时，流程 48 小时后会自动提醒其上级。"),
    (
        "如果它超过三天没审批怎么办？",
        "超过三天未审批，系统会自动升级给部门经理；你也可以在“我的申请”里点“催办”。外包员工可同时联系供应商管理员。",
    ),
)

# Three follow-ups the demo appends after the seed's ten turns: the window (12 turns, dropping
# to 4) moves at the 13th turn, so the demo shows turns 1-9 folded into the running summary.
OA_FOLLOW_UP_TURNS: tuple[tuple[str, str], ...] = (
    ("催办之后还没人处理呢？", "可以联系 HR 服务台登记工单，HR 会在一个工作日内协调审批人处理。"),
    ("加班费什么时候发？", "法定节假日的加班费随次月工资发放；外包员工由供应商按合同结算。"),
    ("能导出我的加班记录吗？", "可以：考勤管理 → 我的加班 → 右上角“导出”，生成 Excel 文件。"),
)

TOOLS_SYSTEM_PROMPT = "You are an HR assistant. Use the tools to look up the employee's records."

TOOLS_USER_QUESTION = "帮我查一下我这个月的加班时长和剩余调休。"

TOOLS_ASSISTANT_CALLS: dict[str, Any] = {
    "reasoning_content": "The user wants two numbers for November 2026: overtime hours and the remaining "
    "compensatory leave. Two independent lookups — call both tools at once.",
    "thinking_duration_ms": 1830,
    "model": "deepseek-v4",
    "finish_reason": "tool_calls",
    "usage": {
        "prompt_tokens": 412,
        "completion_tokens": 96,
        "prompt_tokens_details": {"cached_tokens": 384},
        "completion_tokens_details": {"reasoning_tokens": 58},
    },
    "tool_calls": [
        {
            "id": "call_overtime",
            "type": "function",
            "function": {"name": "get_overtime_hours", "arguments": '{"month": "2026-11"}'},
        },
        {
            "id": "call_leave",
            "type": "function",
            "function": {"name": "get_leave_balance", "arguments": '{"type": "compensatory"}'},
        },
    ],
}

TOOLS_RESULTS: tuple[tuple[str, str, str], ...] = (
    (
        "call_overtime",
        "get_overtime_hours",
        '{"month": "2026-11", "approved_hours": 14.5, "pending_hours": 3}',
    ),
    (
        "call_leave",
        "get_leave_balance",
        '{"type": "compensatory", "remaining_hours": 21, "expires": "2027-05-31"}',
    ),
)

TOOLS_ANSWER: dict[str, Any] = {
    "content": "你 11 月已批准的加班是 14.5 小时，另有 3 小时在审批中；剩余调休 21 小时，2027-05-31 到期。",
    "reasoning_content": "Both tools answered; summarise in Chinese.",
    "thinking_duration_ms": 420,
    "model": "deepseek-v4",
    "finish_reason": "stop",
    "usage": {"prompt_tokens": 530, "completion_tokens": 61},
}

INTERRUPTED_QUESTION = "那 3 小时什么时候能批下来？"
INTERRUPTED_ANSWER = "审批一般在两个工作日内完成，你可以"  # the user pressed stop here
