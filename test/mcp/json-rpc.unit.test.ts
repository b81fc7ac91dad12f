// What an MCP body asks for (read once, before any forward), and the result rewriter that puts a receipt or
// the tools' prices into a JSON or SSE answer however its bytes are cut.
import { Challenge, Credential } from 'mppx'
import { describe, expect, it } from 'vitest'
import { type ResultRewriter, receiptRewriter } from '../../src/mcp/in-band.ts'
import { mppCredentialText, readMcpRequest } from '../../src/mcp/json-rpc.ts'

const body = (x: unknown) => Buffer.from(typeof x === 'string' ? x : JSON.stringify(x))
const head = (type: string) => [Buffer.from('content-type'), Buffer.from(type)]

function run(rewriter: ResultRewriter, type: string, text: string, cut: number[]): string {
  rewriter.onHead(head(type))
  const bytes = Buffer.from(text)
  const out: Buffer[] = []
  let at = 0
  for (const c of [...cut, bytes.length]) {
    out.push(rewriter.onData(bytes.subarray(at, c)))
    at = c
  }
  const end = rewriter.onEnd()
  if (end !== null) out.push(end)
  return Buffer.concat(out).toString()
}

describe('readMcpRequest', () => {
  it('tells protocol methods, tool calls, tools/list and bad bodies apart', () => {
    expect(readMcpRequest(body({ jsonrpc: '2.0', id: 1, method: 'initialize' }))).toEqual({
      kind: 'protocol',
    })
    expect(readMcpRequest(body({ jsonrpc: '2.0', method: 'notifications/initialized' }))).toEqual({
      kind: 'protocol',
    })
    expect(readMcpRequest(body({ jsonrpc: '2.0', id: 2, result: {} }))).toEqual({ kind: 'protocol' })
    expect(readMcpRequest(body({ jsonrpc: '2.0', id: 3, method: 'tools/list' }))).toEqual({
      kind: 'tools_list',
      id: 3,
      paged: false,
    })
    expect(
      readMcpRequest(body({ jsonrpc: '2.0', id: 3, method: 'tools/list', params: { cursor: 'p2' } })),
    ).toEqual({ kind: 'tools_list', id: 3, paged: true })
    expect(
      readMcpRequest(body({ jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'w' } })),
    ).toEqual({
      kind: 'tool_call',
      method: 'tools/call',
      name: 'w',
      id: 'a',
      payment: null,
      mpp: null,
      extension: false,
      resultType: false,
    })
    // Resources by URI, prompts by name; the extension and the 2026-07-28 revision read from _meta.
    expect(
      readMcpRequest(
        body({
          jsonrpc: '2.0',
          id: 5,
          method: 'resources/read',
          params: {
            uri: 'w://x',
            _meta: {
              'io.modelcontextprotocol/protocolVersion': '2026-07-28',
              'io.modelcontextprotocol/clientCapabilities': { extensions: { 'org.x402/payment': {} } },
            },
          },
        }),
      ),
    ).toMatchObject({
      kind: 'tool_call',
      method: 'resources/read',
      name: 'w://x',
      extension: true,
      resultType: true,
    })
    expect(
      readMcpRequest(body({ jsonrpc: '2.0', id: 6, method: 'prompts/get', params: { name: 'p' } })),
    ).toMatchObject({ kind: 'tool_call', method: 'prompts/get', name: 'p', extension: false })
    expect(
      readMcpRequest(body({ jsonrpc: '2.0', id: 7, method: 'resources/read', params: {} })),
    ).toMatchObject({
      kind: 'invalid',
      code: -32602,
    })
    expect(readMcpRequest(body({ jsonrpc: '2.0', id: 8, method: 'server/discover' }))).toEqual({
      kind: 'discover',
      id: 8,
    })
    expect(
      readMcpRequest(body([{ jsonrpc: '2.0', id: 9, method: 'prompts/get', params: { name: 'p' } }])),
    ).toEqual({ kind: 'protocol', calls: [{ method: 'prompts/get', name: 'p' }] })
    const payment = { x402Version: 2, payload: {} }
    expect(
      readMcpRequest(
        body({
          jsonrpc: '2.0',
          id: 4,
          method: 'tools/call',
          params: { name: 'w', _meta: { 'x402/payment': payment } },
        }),
      ),
    ).toMatchObject({ kind: 'tool_call', payment })
    expect(readMcpRequest(body('nope'))).toMatchObject({ kind: 'invalid', code: -32700 })
    expect(readMcpRequest(null)).toMatchObject({ kind: 'invalid', code: -32700 })
    expect(readMcpRequest(body([]))).toMatchObject({ kind: 'invalid', code: -32600 })
    expect(readMcpRequest(body({ jsonrpc: '1.0', id: 5, method: 'ping' }))).toMatchObject({
      kind: 'invalid',
      code: -32600,
      id: 5,
    })
    expect(
      readMcpRequest(body({ jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 7 } })),
    ).toMatchObject({ kind: 'invalid', code: -32602, id: 6 })
  })
})

describe('the result rewriter', () => {
  const receipt = { success: false, errorReason: 'settlement_pending', payer: '0xabc' }
  const answer = { jsonrpc: '2.0', id: 9, result: { content: [{ type: 'text', text: 'sunny' }] } }
  const withReceipt = { ...answer, result: { ...answer.result, _meta: { 'x402/payment-response': receipt } } }

  it('adds the receipt to a JSON answer cut anywhere', () => {
    const text = JSON.stringify(answer)
    for (const cut of [[], [1], [10, 11, 40]]) {
      const out = run(receiptRewriter(9, receipt), 'application/json', text, cut)
      expect(JSON.parse(out)).toEqual(withReceipt)
    }
  })

  it('adds it to the SSE event answering the call only, events cut anywhere, CRLF too', () => {
    const progress = { jsonrpc: '2.0', method: 'notifications/progress', params: { progress: 1 } }
    for (const nl of ['\n', '\r\n']) {
      const text = `event: message${nl}data: ${JSON.stringify(progress)}${nl}${nl}event: message${nl}data: ${JSON.stringify(answer)}${nl}${nl}`
      for (const cut of [[], [5], [20, 21, 90, 130]]) {
        const out = run(receiptRewriter(9, receipt), 'text/event-stream', text, cut)
        const data = out
          .split(/\r?\n/)
          .filter((l) => l.startsWith('data: '))
          .map((l) => JSON.parse(l.slice(6)))
        expect(data).toEqual([progress, withReceipt])
      }
    }
  })

  it('leaves another request’s answer, an error and a non-JSON answer as they are', () => {
    const other = JSON.stringify({ ...answer, id: 10 })
    expect(run(receiptRewriter(9, receipt), 'application/json', other, [3])).toBe(other)
    const error = JSON.stringify({ jsonrpc: '2.0', id: 9, error: { code: -32602, message: 'x' } })
    expect(run(receiptRewriter(9, receipt), 'application/json', error, [])).toBe(error)
    expect(run(receiptRewriter(9, receipt), 'text/plain', 'oops', [])).toBe('oops')
  })
})

describe('mppCredentialText', () => {
  it('rebuilds the wire text mppx serializes from the credential object its MCP client sends', () => {
    const challenge = Challenge.from({
      id: 'abc',
      realm: 'tollgate',
      method: 'evm',
      intent: 'charge',
      request: {
        recipient: '0x2',
        amount: '10',
        methodDetails: { decimals: 6, chainId: 84532 },
        currency: '0x1',
      },
      expires: '2030-01-01T00:00:00.000Z',
      opaque: Buffer.from('{"n":"x1"}').toString('base64url'),
    } as never)
    const wire = Credential.serialize(Credential.from({ challenge, payload: { type: 'authorization' } }))
    // What McpClient puts in params._meta: the deserialized object.
    expect(mppCredentialText(Credential.deserialize(wire))).toBe(wire)
    expect(mppCredentialText('nope')).toBeNull()
  })
})
