// The usage meter on its own: events split anywhere across chunks, CRLF framing, OpenAI and Anthropic usage
// shapes, a JSON answer longer than the tail it keeps, the request rewrite, and charges rounded up.
import { describe, expect, it } from 'vitest'
import { UsageMeter, withStreamUsage } from '../../src/pricing/meter.ts'
import type { UsagePricing } from '../../src/pricing/model.ts'

const TOKENS: UsagePricing = {
  model: 'usage',
  unit: 'tokens',
  maxAtomic: 50_000n,
  perMbAtomic: 1_000_000n,
  perSecondAtomic: null,
  inputPerMillionAtomic: 2_000_000n,
  outputPerMillionAtomic: 10_000_000n,
  cachedInputPerMillionAtomic: 1_000_000n,
  onMissingUsage: 'max_price',
}
const SSE = [Buffer.from('content-type'), Buffer.from('text/event-stream')]
const JSON_HEAD = [Buffer.from('content-type'), Buffer.from('application/json')]

function openAiStream(events: number, asked: boolean, crlf = false): string {
  const nl = crlf ? '\r\n\r\n' : '\n\n'
  let s = ''
  for (let i = 0; i < events; i++)
    s += `data: {"choices":[{"delta":{"content":"t${i}"}}]${asked ? ',"usage":null' : ''}}${nl}`
  if (asked)
    s += `data: {"choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":50,"prompt_tokens_details":{"cached_tokens":200}}}${nl}`
  return `${s}data: [DONE]${nl}`
}

/** Feeds `text` in chunks of `size` bytes (splitting events and multi-byte characters anywhere). */
function feed(meter: UsageMeter, text: string, size: number): string {
  const bytes = Buffer.from(text)
  let out = ''
  for (let i = 0; i < bytes.length; i += size) out += meter.onData(bytes.subarray(i, i + size)).toString()
  return out + (meter.onEnd()?.toString() ?? '')
}

describe('the usage meter', () => {
  it.each([1, 7, 64, 4096])(
    'reads the usage and takes the asked-for event out, in chunks of %i bytes',
    (size) => {
      const meter = new UsageMeter(TOKENS, 0, true)
      meter.onHead(SSE)
      const out = feed(meter, openAiStream(50, true), size)
      expect(out).toBe(openAiStream(50, false))
      const u = meter.finish('complete', 10)
      expect(u).toMatchObject({
        quantities: { input_tokens: 1000, cached_input_tokens: 200, output_tokens: 50 },
        chargeAtomic: 2_700n,
        source: 'measured',
      })
      expect(meter.bytes).toBe(Buffer.byteLength(out))
    },
  )

  it('reads CRLF-framed events and leaves a stream it did not rewrite byte for byte', () => {
    const meter = new UsageMeter(TOKENS, 0, false)
    meter.onHead(SSE)
    const text = openAiStream(5, true, true)
    expect(feed(meter, text, 13)).toBe(text)
    expect(meter.finish('complete', 1).chargeAtomic).toBe(2_700n)
  })

  it('rewrites random streams as the plain rule does, in random chunks', () => {
    // The rule, written the simple way: events end at the first blank line (LF or CRLF); an event whose
    // data parses with a usage and no choices is dropped; every `, "usage": null` member is taken out. Every
    // event kept with data other than [DONE] counts (the estimate of tokens delivered).
    function byTheRule(text: string): { out: string; events: number } {
      let rest = text
      let out = ''
      let events = 0
      for (;;) {
        const lf = rest.indexOf('\n\n')
        const crlf = rest.indexOf('\r\n\r\n')
        if (lf < 0 && crlf < 0) return { out: out + rest, events }
        const [at, length] = crlf >= 0 && (lf < 0 || crlf < lf) ? [crlf, 4] : [lf, 2]
        const event = rest.slice(0, at)
        const separator = rest.slice(at, at + length)
        rest = rest.slice(at + length)
        const data = event
          .split(/\r?\n/)
          .filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(l.charCodeAt(5) === 32 ? 6 : 5))
          .join('')
        let parsed: { usage?: unknown; choices?: unknown } | null = null
        try {
          parsed = data.includes('"usage"') ? JSON.parse(data) : null
        } catch {}
        if (parsed?.usage && Array.isArray(parsed.choices) && parsed.choices.length === 0) continue
        if (data !== '' && data !== '[DONE]') events++
        out += event.replace(/,\s*"usage"\s*:\s*null/g, '') + separator
      }
    }
    let seed = 7
    const random = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31
      return seed % n
    }
    const shapes = [
      (i: number) => `data: {"choices":[{"delta":{"content":"t${i} é"}}],"usage":null}`,
      (i: number) => `data:{"choices":[{"delta":{"content":"${i}"}}], "usage" : null}`,
      (i: number) => `event: chunk\ndata: {"choices":[{"delta":{"content":"${i}"}}],"usage":null}`,
      (i: number) => `data: {"choices":[{"delta":{"content":"${i}","usage":null}}]}`,
      (i: number) => `data: {"type":"usage","n":${i},"usage":null}`,
      (i: number) => `data: {"choices":[{"delta":{"content":"a \\"usage\\":null ${i}"}}],"usage":null}`,
      () => ': keep-alive',
      (i: number) => `data: {"choices":[{"delta":\ndata: {"content":"${i}"}}],"usage":null}`,
      () => 'data: [DONE]',
    ]
    for (let round = 0; round < 200; round++) {
      let text = ''
      const events = 1 + random(40)
      for (let i = 0; i < events; i++)
        text += shapes[random(shapes.length)]!(i) + (random(3) === 0 ? '\r\n\r\n' : '\n\n')
      // The usage event, now and then after a nested `"usage":null` (read all the same).
      const nested = round % 2 === 0 ? '"meta":{"usage":null},' : ''
      text += `data: {"choices":[],${nested}"usage":{"prompt_tokens":${10 + round},"completion_tokens":${events}}}\n\n`
      const meter = new UsageMeter(TOKENS, 0, true)
      meter.onHead(SSE)
      const bytes = Buffer.from(text)
      let out = ''
      for (let i = 0; i < bytes.length; ) {
        const size = 1 + random(random(2) === 0 ? 8 : 600)
        out += meter.onData(bytes.subarray(i, i + size)).toString()
        i += size
      }
      out += meter.onEnd()?.toString() ?? ''
      const rule = byTheRule(text)
      expect(out).toBe(rule.out)
      expect(meter.events).toBe(rule.events)
      expect(meter.finish('complete', 1).quantities).toEqual({
        input_tokens: 10 + round,
        cached_input_tokens: 0,
        output_tokens: events,
      })
    }
  })

  it('stops rewriting at an event longer than it holds, and loses none of what it held', () => {
    const small = (i: number) => `data: {"choices":[{"delta":{"content":"${i}"}}],"usage":null}\n\n`
    const big = `data: {"choices":[{"delta":{"content":"${'x'.repeat(300_000)}"}}],"usage":null}\n\n`
    const text = small(1) + small(2) + big + small(3)
    const meter = new UsageMeter(TOKENS, 0, true)
    meter.onHead(SSE)
    // Chunks of 100,000 bytes: the big event is held across two of them before it passes the limit.
    const out = feed(meter, text, 100_000)
    const rewritten = (t: string) => t.replace(',"usage":null', '')
    expect(out).toBe(rewritten(small(1)) + rewritten(small(2)) + big + small(3))
    expect(meter.bytes).toBe(Buffer.byteLength(out))
  })

  it('merges Anthropic usage over message_start and the last message_delta', () => {
    const meter = new UsageMeter(TOKENS, 0, false)
    meter.onHead(SSE)
    const text =
      'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":900,"cache_creation_input_tokens":100,"cache_read_input_tokens":200,"output_tokens":1}}}\n\n' +
      'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":20}}\n\n' +
      'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":50}}\n\n'
    feed(meter, text, 10)
    expect(meter.finish('complete', 1).quantities).toEqual({
      input_tokens: 1000,
      cached_input_tokens: 200,
      output_tokens: 50,
    })
  })

  it('finds the usage at the end of a JSON answer longer than the tail it keeps', () => {
    const meter = new UsageMeter(TOKENS, 0, false)
    meter.onHead(JSON_HEAD)
    const text = JSON.stringify({
      choices: [{ message: { content: 'x"{}'.repeat(100_000) } }],
      usage: { prompt_tokens: 1200, completion_tokens: 50, prompt_tokens_details: { cached_tokens: 200 } },
    })
    feed(meter, text, 16_384)
    expect(meter.finish('complete', 1).chargeAtomic).toBe(2_700n)
  })

  it('treats a malformed usage as missing, and caps a charge above the ceiling', () => {
    const bad = new UsageMeter({ ...TOKENS, onMissingUsage: 'nothing' }, 0, false)
    bad.onHead(JSON_HEAD)
    feed(bad, '{"usage":{"prompt_tokens":-3,"completion_tokens":1}}', 5)
    expect(bad.finish('complete', 1)).toMatchObject({ chargeAtomic: 0n, fallback: 'malformed' })
    const huge = new UsageMeter(TOKENS, 0, false)
    huge.onHead(JSON_HEAD)
    feed(huge, '{"usage":{"prompt_tokens":9000000,"completion_tokens":9000000}}', 5)
    expect(huge.finish('complete', 1)).toMatchObject({ chargeAtomic: 50_000n, capped: true })
  })

  it('rounds a fraction of a base unit up, and prices bytes and time', () => {
    const bytes = new UsageMeter({ ...TOKENS, unit: 'response_bytes', perMbAtomic: 1n }, 0, false)
    bytes.onHead(JSON_HEAD)
    bytes.onData(Buffer.alloc(10))
    expect(bytes.finish('complete', 1).chargeAtomic).toBe(1n)
    const time = new UsageMeter({ ...TOKENS, unit: 'duration_ms', perSecondAtomic: 1_000n }, 100, false)
    expect(time.finish('complete', 1_600.2)).toMatchObject({
      quantities: { duration_ms: 1501 },
      chargeAtomic: 1_501n,
    })
  })
})

describe('asking a stream for its usage', () => {
  it('adds include_usage to a streaming request that did not ask, and nothing else', () => {
    expect(JSON.parse(withStreamUsage(Buffer.from('{"stream":true,"model":"m"}'))!.toString())).toEqual({
      stream: true,
      model: 'm',
      stream_options: { include_usage: true },
    })
    expect(withStreamUsage(Buffer.from('{"stream":true,"stream_options":{"include_usage":true}}'))).toBeNull()
    expect(withStreamUsage(Buffer.from('{"model":"m"}'))).toBeNull()
    expect(withStreamUsage(Buffer.from('not json'))).toBeNull()
  })
})
