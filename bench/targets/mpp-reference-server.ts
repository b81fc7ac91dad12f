// MPP's reference as its users run it: Express with mppx/express's Mppx (mppx/server underneath) and its
// `evm` charge method, whose `settle` submits each verified EIP-3009 authorization (transferWithAuthorization)
// on the bench's anvil and waits for its receipt before the route answers, as mppx's evm charge requires of a
// server without an x402 facilitator. GET /data is priced 0.001 USDC in the bench's token and forwards to the
// bench upstream. Only the published package's own APIs are used. Prints its port.
import express from 'express'
import { evm } from 'mppx/evm/server'
import { Mppx } from 'mppx/express'
import {
  type Address,
  type Chain,
  createWalletClient,
  type Hex,
  http,
  parseAbi,
  parseSignature,
  publicActions,
} from 'viem'
import { nonceManager, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'

const env = (name: string) => {
  const value = process.env[name]
  if (!value) throw new Error(`mpp-reference: ${name} is not set`)
  return value
}
const rpcUrl = env('RPC_URL')
const usdc = env('USDC_ADDRESS') as Address
const upstream = env('UPSTREAM')
const chainId = Number(env('CHAIN_ID'))

// The server pays the gas of every settlement from its own account; viem's nonce manager hands out nonces
// locally, as any server settling concurrent payments from one key must.
const account = privateKeyToAccount(env('SETTLER_KEY') as Hex, { nonceManager })
const wallet = createWalletClient({
  account,
  chain: { ...baseSepolia, id: chainId, rpcUrls: { default: { http: [rpcUrl] } } } as Chain,
  transport: http(rpcUrl),
  // anvil mines each transaction at once: poll for the receipt as a local server would, not every 1 s.
  pollingInterval: 50,
}).extend(publicActions)

const tokenAbi = parseAbi([
  'function name() view returns (string)',
  'function version() view returns (string)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
])
const [tokenName, tokenVersion] = await Promise.all([
  wallet.readContract({ address: usdc, abi: tokenAbi, functionName: 'name' }),
  wallet.readContract({ address: usdc, abi: tokenAbi, functionName: 'version' }),
])

interface Authorization {
  from: Address
  to: Address
  value: string
  validAfter: string
  validBefore: string
  nonce: Hex
  signature: Hex
}

const mppx = Mppx.create({
  realm: 'mpp-reference',
  secretKey: env('SECRET_KEY'),
  methods: [
    evm.charge({
      chainId,
      currency: usdc,
      decimals: 6,
      recipient: env('PAY_TO') as Address,
      authorization: { name: tokenName, version: tokenVersion },
      // One transaction per call, confirmed before the answer: mppx's receipt names it.
      settle: async ({ payload }: { payload: Authorization }) => {
        const { v, r, s, yParity } = parseSignature(payload.signature)
        const hash = await wallet.writeContract({
          address: usdc,
          abi: tokenAbi,
          functionName: 'transferWithAuthorization',
          args: [
            payload.from,
            payload.to,
            BigInt(payload.value),
            BigInt(payload.validAfter),
            BigInt(payload.validBefore),
            payload.nonce,
            Number(v ?? BigInt(yParity + 27)),
            r,
            s,
          ],
        })
        const receipt = await wallet.waitForTransactionReceipt({ hash })
        if (receipt.status !== 'success') throw new Error(`settlement ${hash} reverted`)
        return { reference: hash }
      },
    } as never),
  ],
})

/** The part of Express's response the forwarding route uses (express ships no types). */
interface Reply {
  status(code: number): Reply
  type(mime: string): Reply
  send(body: Buffer): void
}
const app = express()
app.get('/data', mppx.charge({ amount: '0.001' }), async (_req: unknown, res: Reply) => {
  const r = await fetch(`${upstream}/data`)
  res
    .status(r.status)
    .type('application/json')
    .send(Buffer.from(await r.arrayBuffer()))
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
