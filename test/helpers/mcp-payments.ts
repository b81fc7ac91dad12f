// What the MCP payment tests share: the weather-priced MCP endpoint they create, the weather calls the
// merchant's API books for it, and the check that a paid tools/call ran once without its payment while the
// same payload again in _meta is refused before the server sees it.
import type { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { expect } from 'vitest'
import type { Service } from '../../src/service.ts'
import { callApi } from './service.ts'

/** One priced tool (weather, $0.01), one free (echo), anything else at the default. */
export const WEATHER_MCP = { tools: { weather: 0.01 }, default_price: 0.003, free_tools: ['echo'] }

/** What the MCP upstream doubles record: tools/call served by name, and every JSON-RPC message. */
interface RecordingMcpUpstream {
  url: string
  served: Map<string, number>
  messages: unknown[]
}

/** An MCP endpoint of WEATHER_MCP in front of `upstreamUrl`, in-band or answering HTTP 402. */
export async function weatherMcpEndpoint(
  svcUrl: string,
  key: string,
  upstreamUrl: string,
  inBand: boolean,
  extra: Record<string, unknown> = {},
) {
  const r = await callApi(svcUrl, '/api/v1/endpoints', {
    key,
    body: { upstream_url: upstreamUrl, kind: 'mcp', mcp: { ...WEATHER_MCP, in_band: inBand }, ...extra },
  })
  if (r.status !== 201) throw new Error(`endpoint: ${r.status} ${r.text}`)
  return r.body as { id: string; metered_url: string }
}

/** The weather calls booked for an endpoint, once the captures are flushed. */
export async function weatherCalls(svc: Service, key: string, endpointId: string) {
  await svc.flushCaptures()
  const r = await callApi(svc.url, `/api/v1/calls?endpoint_id=${endpointId}&tool=weather`, { key })
  return r.body.data as Array<{ tool: string; amount_atomic: string }>
}

/**
 * After one paid weather call for `city`: the server got it once and without the signed authorization, and
 * the same payload again in _meta is refused with proof_already_used, unserved.
 */
export async function expectServedOnceReplayRefused(
  client: Client,
  upstream: RecordingMcpUpstream,
  payload: unknown,
  city: string,
): Promise<void> {
  expect(upstream.served.get('weather')).toBe(1)
  const forwarded = upstream.messages.filter(
    (m) => (m as { method?: string } | undefined)?.method === 'tools/call',
  ) as Array<{ params: Record<string, unknown> }>
  expect(forwarded.at(-1)!.params).toEqual({ name: 'weather', arguments: { city } })

  const replay = await client.callTool({
    name: 'weather',
    arguments: { city },
    _meta: { 'x402/payment': payload },
  })
  expect(replay.isError).toBe(true)
  expect((replay.structuredContent as { error: string }).error).toBe('proof_already_used')
  expect(upstream.served.get('weather')).toBe(1)
}
