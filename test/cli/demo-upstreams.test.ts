// The README's demo upstreams on their own (tollgate in front of them is the walk-through test's part):
// demo-llm streams a word per chunk and reports usage only when asked, as OpenAI does, counting a word as a
// token; demo-mcp is an SDK server the SDK client lists and calls; mcp-call against a server that asks for
// no payment lists and calls without paying, and refuses arguments that are not a JSON object; demo-realtime
// answers the Realtime events and counts what it sent each connection.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import WebSocket from 'ws'
import { startDemoLlm } from '../../src/cli/demo-llm.ts'
import { startDemoMcp } from '../../src/cli/demo-mcp.ts'
import { CACHED_TOKENS, INPUT_TOKENS, startDemoRealtime } from '../../src/cli/demo-realtime.ts'
import type { Listening } from '../../src/cli/demo-server.ts'
import { main as mcpCall } from '../../src/cli/mcp-call.ts'

let llm: Listening
let mcp: Listening
let llmUrl: string
let mcpUrl: string

beforeAll(async () => {
  ;[llm, mcp] = await Promise.all([startDemoLlm(0), startDemoMcp(0)])
  llmUrl = `http://127.0.0.1:${llm.port}/v1`
  mcpUrl = `http://127.0.0.1:${mcp.port}/mcp`
})
afterAll(async () => {
  await Promise.all([llm?.close(), mcp?.close()])
})

async function chat(body: unknown) {
  const r = await fetch(`${llmUrl}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  return { status: r.status, type: r.headers.get('content-type'), text: await r.text() }
}

const events = (sse: string) =>
  sse
    .split('\n\n')
    .filter((e) => e.startsWith('data: {'))
    .map((e) => JSON.parse(e.slice(6)) as { choices: unknown[]; usage?: unknown })

describe('demo-llm', () => {
  const messages = [{ role: 'user', content: 'Say a thousand words' }]

  it('streams max_tokens words, a chunk each, and no usage when the client did not ask', async () => {
    const r = await chat({ model: 'demo', stream: true, max_tokens: 30, messages })
    expect(r.status).toBe(200)
    expect(r.type).toBe('text/event-stream')
    expect(r.text.endsWith('data: [DONE]\n\n')).toBe(true)
    const all = events(r.text)
    // 30 words and the finish chunk, none with a usage field.
    expect(all).toHaveLength(31)
    expect(all.filter((e) => 'usage' in e)).toEqual([])
  })

  it('with stream_options.include_usage: "usage": null on every chunk, then a usage chunk (a word a token)', async () => {
    const r = await chat({
      model: 'demo',
      stream: true,
      max_tokens: 30,
      messages,
      stream_options: { include_usage: true },
    })
    const all = events(r.text)
    expect(all).toHaveLength(32)
    expect(all.slice(0, 31).every((e) => e.usage === null)).toBe(true)
    expect(all[31]).toMatchObject({
      choices: [],
      usage: { prompt_tokens: 4, completion_tokens: 30, prompt_tokens_details: { cached_tokens: 0 } },
    })
  })

  it('answers plain JSON with its usage without stream; refuses a body that is not JSON; 404 elsewhere', async () => {
    const r = await chat({ model: 'demo', max_tokens: 5, messages })
    expect(r.type).toBe('application/json')
    const body = JSON.parse(r.text) as { choices: [{ message: { content: string } }]; usage: unknown }
    expect(body.choices[0].message.content.split(' ')).toHaveLength(5)
    expect(body.usage).toMatchObject({ prompt_tokens: 4, completion_tokens: 5 })
    const bad = await fetch(`${llmUrl}/chat/completions`, { method: 'POST', body: '{' })
    expect(bad.status).toBe(400)
    expect((await fetch(`${llmUrl}/nothing`)).status).toBe(404)
    const models = (await (await fetch(`${llmUrl}/models`)).json()) as { data: Array<{ id: string }> }
    expect(models.data.map((m) => m.id)).toEqual(['demo'])
  })
})

describe('demo-mcp and mcp-call', () => {
  it('the SDK client lists echo and weather and calls them', async () => {
    const client = new Client({ name: 'test', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl)))
    try {
      const { tools } = await client.listTools()
      expect(tools.map((t) => t.name)).toEqual(['echo', 'weather'])
      const echo = await client.callTool({ name: 'echo', arguments: { text: 'hi' } })
      expect(echo.content).toEqual([{ type: 'text', text: 'hi' }])
      const a = await client.callTool({ name: 'weather', arguments: { city: 'Lyon' } })
      const b = await client.callTool({ name: 'weather', arguments: { city: 'Lyon' } })
      expect(a.content).toEqual(b.content)
      expect((a.content as Array<{ text: string }>)[0]!.text).toMatch(/^Lyon: .+, \d+ °C$/)
    } finally {
      await client.close()
    }
  })

  it('mcp-call lists and calls without paying when nothing asks for payment', async () => {
    const out: string[] = []
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
      out.push(String(chunk))
      return true
    })
    try {
      // No dev chain here: a payer would be looked up only on a 402.
      const code = await mcpCall([mcpUrl, 'echo', '{"text":"free"}'], { RPC_URL: undefined })
      expect(code).toBe(0)
    } finally {
      spy.mockRestore()
    }
    const text = out.join('')
    expect(text).toMatch(/^echo {5}no price \(not through tollgate\?\)$/m)
    expect(text).toMatch(/^weather {2}no price/m)
    expect(text).toContain('echo: free\n')
    expect(text).not.toContain('paid ')
  })

  it('mcp-call refuses arguments that are not a JSON object (a usage error)', async () => {
    await expect(mcpCall([mcpUrl, 'echo', '[1]'])).rejects.toThrow(/JSON object/)
    await expect(mcpCall(['not a url'])).rejects.toThrow(/not a URL/)
  })
})

describe('demo-realtime', () => {
  it('speaks the Realtime events: session.created, items, response.* and response.done with its usage', async () => {
    const rt = await startDemoRealtime(0)
    try {
      const ws = new WebSocket(`ws://127.0.0.1:${rt.port}/v1/realtime?model=demo`, {
        headers: { 'x-request-id': 'req_demo_realtime' },
      })
      const got: Array<{ type: string; [k: string]: any }> = []
      ws.on('message', (d) => got.push(JSON.parse(d.toString())))
      await new Promise((resolve) => ws.on('open', resolve))
      ws.send(
        JSON.stringify({
          type: 'conversation.item.create',
          item: {
            type: 'message',
            role: 'user',
            content: [{ type: 'input_text', text: 'three more words' }],
          },
        }),
      )
      ws.send(JSON.stringify({ type: 'response.create', response: { words: 4 } }))
      ws.send(
        JSON.stringify({ type: 'response.create', response: { words: 2, output_modalities: ['audio'] } }),
      )
      await vi.waitFor(() => expect(got.filter((e) => e.type === 'response.done')).toHaveLength(2))
      expect(got.map((e) => e.type)).toEqual([
        'session.created',
        'conversation.item.created',
        'response.created',
        ...Array(4).fill('response.text.delta'),
        'response.done',
        'response.created',
        'response.audio.delta',
        'response.audio.delta',
        'response.done',
      ])
      const [text, audio] = got.filter((e) => e.type === 'response.done')
      expect(text!.response.usage).toMatchObject({
        input_tokens: INPUT_TOKENS + 3,
        output_tokens: 4,
        input_token_details: { cached_tokens: CACHED_TOKENS },
        output_token_details: { text_tokens: 4, audio_tokens: 0 },
      })
      expect(audio!.response.usage).toMatchObject({
        input_tokens: INPUT_TOKENS,
        output_tokens: 2,
        output_token_details: { text_tokens: 0, audio_tokens: 2 },
      })
      // What it sent, by the upgrade's request id: the most a session through tollgate could be charged.
      expect(rt.sent.get('req_demo_realtime')).toMatchObject({
        messages: got.length,
        deltas: 6,
        reportedDeltas: 6,
        input_tokens: 2 * INPUT_TOKENS + 3,
        cached_tokens: 2 * CACHED_TOKENS,
        output_tokens: 6,
        responses: 2,
      })
      ws.close(1000, 'done')
      await vi.waitFor(() => expect(rt.closes).toEqual([{ code: 1000, reason: 'done' }]))
      expect(rt.open()).toBe(0)
    } finally {
      await rt.close()
    }
  })
})
