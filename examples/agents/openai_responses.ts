// An agent loop on OpenAI's Responses API with the official openai package,
// its tools run by callsheet: the response is posted as it is, and the
// answer's input items are appended as they are (docs/clients.md).
//
// Environment: CALLSHEET_URL, CALLSHEET_TOKEN, OPENAI_BASE_URL, OPENAI_API_KEY.
import OpenAI from "openai";
import type { ResponseInputItem } from "openai/resources/responses/responses";
import { Client } from "@callsheet/client";

declare const process: { env: Record<string, string | undefined> };

const callsheet = new Client(process.env.CALLSHEET_URL, { token: process.env.CALLSHEET_TOKEN });
const openai = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY ?? "unused" });

const session = await callsheet.openSession();
const { tools } = await callsheet.tools("openai_responses");
const input: ResponseInputItem[] = [{ role: "user", content: "Write notes.txt, then read it back to me." }];
for (let step = 1; step <= 10; step++) {
  const response = await openai.responses.create({ model: "gpt-5", input, tools, store: false });
  input.push(...(response.output as ResponseInputItem[]));
  if (!response.output.some((item) => item.type === "function_call")) {
    console.log(`final: ${response.output_text}`);
    break;
  }
  const answer = await session.turnNative(response, "openai_responses");
  for (const item of answer.input) console.log(`step ${step}: ${item.type} ${"call_id" in item ? item.call_id : ""} ${JSON.stringify("output" in item ? item.output : item.content).slice(0, 90)}`);
  input.push(...answer.input);
}
