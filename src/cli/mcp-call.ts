// npm run mcp-call -- <MCP URL> [tool] [arguments as JSON]: the published @modelcontextprotocol/sdk client,
// unchanged, through a paid MCP endpoint: lists the tools with the price tollgate wrote into each one's
// _meta (listing is free), then calls the tool. Its fetch answers a 402 as an agent would: it pays the
// quoted price_atomic by a USDC transfer from the payer (the demo payer of .data/dev-chain.json unless
// PAYER_KEY / --key says otherwise) and sends the same request again with the hash in x-payment.
// Exit codes: 0 done, 1 failed (unreachable, payment failed, the tool answered an error), 2 usage.
import { parseArgs } from 'node:util'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { Hex } from 'viem'
import { isMain } from './is-main.ts'
import { devPayer, transferUsdc } from './pay.ts'

const USAGE = `usage: npm run mcp-call -- <url> [tool] [arguments]

  <url>        an MCP endpoint's metered URL (or any Streamable HTTP MCP server)
  [tool]       a tool to call after listing them
  [arguments]  its arguments as a JSON object (default {})

options (each also from the environment; default: .data/dev-chain.json, written by npm start):
  --rpc-url <url>    RPC_URL    the dev chain's RPC
  --key <0x…>        PAYER_KEY  the payer's private key (default: the demo payer)
  -h, --help

prints each tool and its price, what was paid (base units and transaction hash) and the tool's answer;
exit 0 done, 1 failed, 2 usage
`

class UsageError extends Error {}

type Fetch = (url: string | URL, init?: RequestInit) => Promise<Response>

/** A fetch that pays a 402 once by USDC transfer and sends the request again with the hash. */
function payingFetch(pay: (q: { recipient: Hex; asset: Hex; atomic: bigint }) => Promise<Hex>): Fetch {
  return async (url, init) => {
    const first = await fetch(url, init)
    if (first.status !== 402) return first
    const quote = (await first.json().catch(() => null)) as {
      recipient?: string
      asset?: string
      price_atomic?: string
    } | null
    if (!quote?.recipient || !quote.asset || !quote.price_atomic) {
      throw new Error('402 without a payment requirement (recipient, asset, price_atomic)')
    }
    const atomic = BigInt(quote.price_atomic)
    const hash = await pay({ recipient: quote.recipient as Hex, asset: quote.asset as Hex, atomic })
    process.stdout.write(`paid ${atomic} base units: ${hash}\n`)
    const headers = new Headers(init?.headers)
    headers.set('x-payment', hash)
    return fetch(url, { ...init, headers })
  }
}

/** What tollgate wrote into a tool's _meta["tollgate/price"], in words. */
function priceText(meta: Record<string, unknown> | undefined): string {
  const p = meta?.['tollgate/price'] as
    | { free?: boolean; price?: number; model?: string; unit?: string; max_price?: number }
    | undefined
  if (p === undefined) return 'no price (not through tollgate?)'
  if (p.free) return 'free'
  if (p.model === 'usage') return `up to $${p.max_price} a call, by ${p.unit}`
  return `$${p.price} a call`
}

export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      'rpc-url': { type: 'string' },
      key: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  if (values.help) {
    process.stdout.write(USAGE)
    return 0
  }
  const [target, tool, argsText] = positionals
  if (!target || positionals.length > 3) throw new UsageError('give the MCP URL, then optionally a tool')
  let url: URL
  try {
    url = new URL(target)
  } catch {
    throw new UsageError(`${target} is not a URL`)
  }
  let args: Record<string, unknown> = {}
  if (argsText !== undefined) {
    const parsed = (() => {
      try {
        return JSON.parse(argsText) as unknown
      } catch {
        return null
      }
    })()
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
      throw new UsageError('the arguments must be a JSON object, e.g. \'{"city":"Lyon"}\'')
    args = parsed as Record<string, unknown>
  }
  // The payer is looked up only when a 402 asks: listing free tools needs no chain.
  const pay = (q: { recipient: Hex; asset: Hex; atomic: bigint }) =>
    transferUsdc(devPayer(env, { rpcUrl: values['rpc-url'], key: values.key }), q)
  const client = new Client({ name: 'tollgate-mcp-call', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(url, { fetch: payingFetch(pay) }))
  try {
    const { tools } = await client.listTools()
    const width = Math.max(0, ...tools.map((t) => t.name.length))
    for (const t of tools) process.stdout.write(`${t.name.padEnd(width)}  ${priceText(t._meta)}\n`)
    if (tool === undefined) return 0
    const result = await client.callTool({ name: tool, arguments: args })
    const content = (result.content ?? []) as Array<{ type: string; text?: string }>
    for (const c of content) process.stdout.write(`${tool}: ${c.type === 'text' ? c.text : `(${c.type})`}\n`)
    return result.isError ? 1 : 0
  } finally {
    await client.close()
  }
}

if (isMain(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      const usage = err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')
      process.stderr.write(`mcp-call: ${(err as Error).message}\n${usage ? `\n${USAGE}` : ''}`)
      process.exit(usage ? 2 : 1)
    },
  )
}
