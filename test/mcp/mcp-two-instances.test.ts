// Two tollgate instances on one PostgreSQL database in front of one MCP server: of 20 concurrent tools/call
// carrying one payment over both, the server serves exactly one and one call row is booked with its tool;
// a replay on either instance is refused and not forwarded.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { type McpUpstream, startMcpUpstream } from '../helpers/mcp-upstream.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'

describe.runIf(usingServer)('an MCP endpoint over two instances on one database', () => {
  let a: TestService
  let b: TestService
  let upstream: McpUpstream
  let payer: Funded
  let id: string
  let client: Client
  let sessionId: string

  beforeAll(async () => {
    const databaseUrl = await freshDatabaseUrl()
    a = await startTestService({ databaseUrl })
    b = await startTestService({ databaseUrl, treasury: a.treasury })
    upstream = await startMcpUpstream({ json: true })
    payer = await fundedAccount(100_000_000n)
    const merchant = await registerMerchant(a)
    const ep = await a.api('/api/v1/endpoints', {
      key: merchant.key,
      body: {
        upstream_url: upstream.url,
        kind: 'mcp',
        mcp: { tools: { weather: 0.01 }, default_price: 0.01 },
      },
    })
    id = ep.body.id
    // One session, opened through instance a, used through both.
    const transport = new StreamableHTTPClientTransport(new URL(`${a.url}/m/${id}`))
    client = new Client({ name: 'two', version: '1.0.0' })
    await client.connect(transport)
    sessionId = transport.sessionId!
  })
  afterAll(async () => {
    await client?.close()
    await a?.stop()
    await b?.stop()
    await upstream?.close()
  })

  const call = (s: TestService, hash: string, n: number) =>
    fetch(`${s.url}/m/${id}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': sessionId,
        'x-payment': hash,
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: n,
        method: 'tools/call',
        params: { name: 'weather', arguments: { city: 'Lyon' } },
      }),
    }).then(async (r) => ({ status: r.status, text: await r.text() }))

  it('serves exactly one of 20 concurrent calls carrying one payment over both, booked once', async () => {
    const hash = await payUsdc(payer, a.chain.treasury, 10_000n)
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => call(i % 2 === 0 ? a : b, hash, i)),
    )
    const served = answers.filter((x) => x.status === 200)
    expect(served).toHaveLength(1)
    expect(JSON.parse(served[0]!.text).result.content).toEqual([{ type: 'text', text: 'sunny in Lyon' }])
    expect(upstream.served.get('weather')).toBe(1)
    await a.flushCaptures()
    await b.flushCaptures()
    const replay = await call(a, hash, 99)
    expect(replay.status).toBe(402)
    expect(JSON.parse(replay.text).error).toBe('proof_already_used')
    expect(upstream.served.get('weather')).toBe(1)
    const rows = await a.sql<{ amount_atomic: bigint; tool: string }[]>`
      SELECT amount_atomic, tool FROM calls WHERE call_proof_key(proof_key, proof) = ${`tx:${hash.toLowerCase()}`}`
    expect(rows).toEqual([{ amount_atomic: 10_000n, tool: 'weather' }])
  })
})
