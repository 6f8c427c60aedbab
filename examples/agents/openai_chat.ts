// An agent loop on OpenAI's Chat Completions with the official openai
// package, its tools run by callsheet: the completion is posted as it is,
// and the answer's messages are appended as they are (docs/clients.md).
//
// Environment: CALLSHEET_URL, CALLSHEET_TOKEN, OPENAI_BASE_URL (the fake
// model server in CI: examples/agents/fakemodel), OPENAI_API_KEY.
import OpenAI from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { Client } from "@callsheet/client";

declare const process: { env: Record<string, string | undefined> };

const callsheet = new Client(process.env.CALLSHEET_URL, { token: process.env.CALLSHEET_TOKEN });
const openai = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY ?? "unused" });

const session = await callsheet.openSession();
const { tools } = await callsheet.tools("openai");
const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Write notes.txt, then read it back to me." }];
for (let step = 1; step <= 10; step++) {
  const completion = await openai.chat.completions.create({ model: "gpt-4.1", messages, tools });
  const message = completion.choices[0]!.message;
  messages.push(message);
  if (!message.tool_calls?.length) {
    console.log(`final: ${message.content}`);
    break;
  }
  const answer = await session.turnNative(completion, "openai_chat");
  for (const m of answer.messages) console.log(`step ${step}: ${m.role} ${"tool_call_id" in m ? m.tool_call_id : ""} ${JSON.stringify(m.content).slice(0, 90)}`);
  messages.push(...answer.messages);
}
