// The x402 reference as its users run it: Express with @x402/express's paymentMiddleware, its resource
// server and an in-process facilitator (@x402/core's x402Facilitator with @x402/evm's exact and upto
// schemes) that verifies each payment and settles it on the bench's anvil before the response leaves.
// GET /data (exact) forwards to the bench upstream; POST /v1/chat/completions (upto) reads the upstream's
// OpenAI-style stream whole, prices its usage object and settles that amount (setSettlementOverrides), as
// the reference's upto example does: the origin declares the amount. Only the published packages' own APIs
// are used. Prints its port.
import { x402Facilitator } from '@x402/core/facilitator'
import type { FacilitatorClient } from '@x402/core/server'
import { toFacilitatorEvmSigner } from '@x402/evm'
import { registerExactEvmScheme as registerFacilitatorScheme } from '@x402/evm/exact/facilitator'
import { ExactEvmScheme } from '@x402/evm/exact/server'
import { UptoEvmScheme as UptoFacilitatorScheme } from '@x402/evm/upto/facilitator'
import { UptoEvmScheme } from '@x402/evm/upto/server'
import { paymentMiddleware, setSettlementOverrides, x402ResourceServer } from '@x402/express'
import express from 'express'
import { type Address, type Chain, createWalletClient, type Hex, http, parseAbi, publicActions } from 'viem'
import { nonceManager, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'

const env = (name: string) => {
  const value = process.env[name]
  if (!value) throw new Error(`x402-reference: ${name} is not set`)
  return value
}
const rpcUrl = env('RPC_URL')
const usdc = env('USDC_ADDRESS') as Address
const upstream = env('UPSTREAM')
const network = `eip155:${env('CHAIN_ID')}` as const

// The facilitator pays the gas of every settlement from its own account; viem's nonce manager hands out
// nonces locally, as any facilitator settling concurrent payments from one key must.
const account = privateKeyToAccount(env('FACILITATOR_KEY') as Hex, { nonceManager })
const wallet = createWalletClient({
  account,
  chain: { ...baseSepolia, id: Number(env('CHAIN_ID')), rpcUrls: { default: { http: [rpcUrl] } } } as Chain,
  transport: http(rpcUrl),
  // anvil mines each transaction at once: poll for the receipt as a local facilitator would, not every 1 s.
  pollingInterval: 50,
}).extend(publicActions)

const tokenAbi = parseAbi([
  'function name() view returns (string)',
  'function version() view returns (string)',
])
const [tokenName, tokenVersion] = await Promise.all([
  wallet.readContract({ address: usdc, abi: tokenAbi, functionName: 'name' }),
  wallet.readContract({ address: usdc, abi: tokenAbi, functionName: 'version' }),
])

const signer = toFacilitatorEvmSigner({ ...wallet, address: account.address } as never)
const facilitator = registerFacilitatorScheme(new x402Facilitator(), { signer, networks: network }).register(
  network,
  new UptoFacilitatorScheme(signer as never),
)
// In-process: the resource server talks to the facilitator object directly, no HTTP hop between them.
const local: FacilitatorClient = {
  verify: (payload, requirements) => facilitator.verify(payload, requirements),
  settle: (payload, requirements) => facilitator.settle(payload, requirements),
  getSupported: async () => facilitator.getSupported() as never,
}
const server = new x402ResourceServer(local)
  .register(network, new ExactEvmScheme())
  .register(network, new UptoEvmScheme())

const app = express()
app.use(
  paymentMiddleware(
    {
      'GET /data': {
        accepts: {
          scheme: 'exact',
          network,
          payTo: env('PAY_TO'),
          // The same price as the tollgate scenarios (0.001 USDC), in the bench's own token on anvil.
          price: { amount: '1000', asset: usdc, extra: { name: tokenName, version: tokenVersion } },
          maxTimeoutSeconds: 300,
        },
        description: 'Bench data',
        mimeType: 'application/json',
      },
      'POST /v1/chat/completions': {
        accepts: {
          scheme: 'upto',
          network,
          payTo: env('PAY_TO'),
          // The same ceiling as tollgate's usage scenarios (0.001 USDC); the settled amount is the usage's.
          price: { amount: '1000', asset: usdc, extra: { name: tokenName, version: tokenVersion } },
          maxTimeoutSeconds: 300,
        },
        description: 'Bench chat stream',
        mimeType: 'text/event-stream',
      },
    },
    server,
  ),
)
/** The part of Express's response the forwarding route uses (express ships no types). */
interface Reply {
  status(code: number): Reply
  type(mime: string): Reply
  send(body: Buffer): void
}
app.get('/data', async (_req: unknown, res: Reply) => {
  const r = await fetch(`${upstream}/data`)
  res
    .status(r.status)
    .type('application/json')
    .send(Buffer.from(await r.arrayBuffer()))
})
// The same rates as tollgate's usage scenarios, in base units per million tokens: input 0.1, cached input
// 0.05, output 0.4 USDC. Rounded up to the base unit, capped at the ceiling.
const PER_MILLION = { input: 100_000n, cached: 50_000n, output: 400_000n }
const CEILING = 1_000n

/** The charge of the last `usage` object in an OpenAI-style SSE body; the ceiling when there is none. */
function usageCharge(body: string): bigint {
  const at = body.lastIndexOf('"usage":{')
  if (at < 0) return CEILING
  const line = body.slice(body.lastIndexOf('data: ', at) + 6, body.indexOf('\n', at))
  const u = JSON.parse(line).usage as {
    prompt_tokens: number
    completion_tokens: number
    prompt_tokens_details?: { cached_tokens?: number }
  }
  const cached = BigInt(u.prompt_tokens_details?.cached_tokens ?? 0)
  const micro =
    (BigInt(u.prompt_tokens) - cached) * PER_MILLION.input +
    cached * PER_MILLION.cached +
    BigInt(u.completion_tokens) * PER_MILLION.output
  const charge = (micro + 999_999n) / 1_000_000n
  return charge > CEILING ? CEILING : charge
}

app.post('/v1/chat/completions', async (req: NodeJS.ReadableStream, res: Reply & { setHeader(): void }) => {
  const parts: Buffer[] = []
  for await (const c of req) parts.push(c as Buffer)
  const r = await fetch(`${upstream}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: Buffer.concat(parts),
  })
  const body = Buffer.from(await r.arrayBuffer())
  // Read before the middleware settles: upto settles what the route declares, at most the signed maximum.
  setSettlementOverrides(res as never, { amount: usageCharge(body.toString('utf8')).toString() })
  res.status(r.status).type('text/event-stream').send(body)
})

const listener = app.listen(0, '127.0.0.1', () => {
  const address = listener.address()
  process.stdout.write(
    `${JSON.stringify({ port: typeof address === 'object' && address ? address.port : 0 })}\n`,
  )
})
listener.keepAliveTimeout = 65_000
setTimeout(() => process.exit(0), Number(process.env.MAX_MS ?? 600_000)).unref()
process.on('SIGTERM', () => process.exit(0))
