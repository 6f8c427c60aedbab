// An agent loop on Anthropic's Messages API with the official
// @anthropic-ai/sdk package, its tools run by callsheet: the message is
// posted as it is, and the answer's user message is appended as it is
// (docs/clients.md).
//
// Environment: CALLSHEET_URL, CALLSHEET_TOKEN, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY.
import Anthropic from "@anthropic-ai/sdk";
import type { MessageParam } from "@anthropic-ai/sdk/resources/messages";
import { Client } from "@callsheet/client";

declare const process: { env: Record<string, string | undefined> };

const callsheet = new Client(process.env.CALLSHEET_URL, { token: process.env.CALLSHEET_TOKEN });
const anthropic = new Anthropic({ baseURL: process.env.ANTHROPIC_BASE_URL ?? null, apiKey: process.env.ANTHROPIC_API_KEY ?? "unused" });

const session = await callsheet.openSession();
const { tools } = await callsheet.tools("anthropic");
const messages: MessageParam[] = [{ role: "user", content: "Write notes.txt, then read it back to me." }];
for (let step = 1; step <= 10; step++) {
  const message = await anthropic.messages.create({ model: "claude-sonnet-4-5", max_tokens: 1024, messages, tools });
  messages.push({ role: "assistant", content: message.content });
  if (message.stop_reason !== "tool_use") {
    console.log(`final: ${message.content.map((b) => (b.type === "text" ? b.text : "")).join("")}`);
    break;
  }
  const answer = await session.turnNative(message, "anthropic");
  for (const b of answer.message.content) console.log(`step ${step}: ${b.type} ${"tool_use_id" in b ? b.tool_use_id : ""} ${JSON.stringify("content" in b ? b.content : b.text).slice(0, 90)}${"is_error" in b && b.is_error ? " (is_error)" : ""}`);
  messages.push(answer.message);
}
