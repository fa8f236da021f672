"""LangChain on convlog, offline: a ``ConvlogChatMessageHistory`` where an app keeps an
``InMemoryChatMessageHistory``, so each call is sent the conversation's context from convlog —
windowed, summarised (the summary a ``SystemMessage``), within the budget; each
``add_messages`` is one atomic, idempotent append.

The model is LangChain's own fake chat model (``GenericFakeChatModel``: scripted answers, no
network, no key); put any chat model in its place and the rest stays. Needs
``pip install -e '.[langchain]'`` and a running ``convlog serve``:

    CONVLOG_URL=http://127.0.0.1:8080 CONVLOG_TOKEN=... python examples/python/langchain_history.py
"""

from __future__ import annotations

import uuid

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

from convlog.client import ConvlogClient
from convlog.integrations.langchain import ConvlogChatMessageHistory


def main() -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage("Hi Ada!"), AIMessage("You are Ada.")]))  # any chat model
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    chain = prompt | model
    with ConvlogClient() as client:  # CONVLOG_URL and CONVLOG_TOKEN; closed at the end of the block
        session = f"langchain-{uuid.uuid4().hex[:8]}"
        # the one line that changes: where the app made an InMemoryChatMessageHistory
        history = ConvlogChatMessageHistory(session, client=client, user_id="u1", model="gpt-4o", budget_tokens=8000)
        print(f"convlog at {client.base_url}: session {session}")
        for question in ("Hi, I'm Ada.", "Who am I?"):
            answer = chain.invoke({"history": history.messages, "question": question})
            history.add_messages([HumanMessage(question), answer])  # one atomic append
            print(f"user: {question}")
            print(f"assistant: {answer.content}")
        print(f"the history in convlog: {[m.content for m in history.messages]}")


if __name__ == "__main__":
    main()
