// Start-up of the chain side: picks the RPC (or starts the dev chain), the treasury and USDC, then proves
// they match the configured network before the service takes a single request.
import { type Address, getAddress, type Hex } from 'viem'
import type { PrivateKeyAccount } from 'viem/accounts'
import { getChainId } from 'viem/actions'
import type { Config, Network } from '../config/schema.ts'
import { configDollars } from '../money.ts'
import {
  type ChainPublicClient,
  type ChainWalletClient,
  chainDefinition,
  createChainPublicClient,
  createChainWalletClient,
  type RpcRequestListener,
} from './client.ts'
import { devAccount } from './dev-accounts.ts'
import { type DevChain, startDevChain } from './dev-chain.ts'
import { ChainError } from './errors.ts'
import { caip2, networks } from './networks.ts'
import { lazyOwnSenders } from './own-transactions.ts'
import { signingAccount } from './signing-account.ts'
import { createTokenReads, type TokenReads } from './token-reads.ts'
import { readTokenInfo } from './usdc.ts'

export interface UsdcInfo {
  address: Address
  decimals: number
  name: string
  version: string
}

export interface ChainContext {
  network: Network
  chainId: number
  caip2: `eip155:${number}`
  /** x402 v1 network name. */
  x402Network: string
  publicClient: ChainPublicClient
  /** The token reads of x402 verifications, on the hot path (./token-reads.ts). */
  tokenReads: TokenReads
  /** Signs as the treasury: payouts, refunds, x402 settlements. */
  walletClient: ChainWalletClient
  treasury: Address
  usdc: UsdcInfo
  explorerUrl: string | null
  rpcUrl: string
  /** The dev chain on `local` (started here or handed in), with its demo payers; null elsewhere. */
  devChain: DevChain | null
  /**
   * The addresses tollgate's own transactions come from (the treasury, every settler slot), lowercase: a
   * transfer they sent is a settlement, never a customer's payment (./own-transactions.ts).
   */
  ownSenders(): ReadonlySet<string>
  close(): Promise<void>
}

/** Structural, so chain/ needs nothing from observability/ (the service's Logger fits). */
export interface ChainLogger {
  info(msg: string, fields?: Record<string, unknown>): void
}

export interface ConnectOptions {
  /** An already running dev chain to use on `local` (tests share one); it is not stopped by close(). */
  devChain?: DevChain
  logger?: ChainLogger
  /** Told of every HTTP request to the RPC node (the service counts them in a metric). */
  onRpcRequest?: RpcRequestListener
}

export async function connectChain(config: Config, options: ConnectOptions = {}): Promise<ChainContext> {
  const { network } = config.chain
  let devChain: DevChain | null = options.devChain ?? null
  let ownsDevChain = false
  if (network === 'local' && !devChain && !config.chain.rpc_url) {
    const as = config.local_chain.announce_as
    devChain = await startDevChain({
      payers: config.chain.dev_payers,
      payerFunding: configDollars(config.chain.dev_payer_funding),
      stateFile: config.local_chain.state_file ?? undefined,
      // Standing in for a public network: its chain id and its USDC address, as x402 clients know them.
      ...(as ? { chainId: networks[as].chainId!, usdcAt: networks[as].usdcAddress! } : {}),
    })
    ownsDevChain = true
    options.logger?.info('dev chain started', { rpc_url: devChain.rpcUrl, usdc: devChain.usdcAddress })
  }
  const close = async () => {
    if (ownsDevChain) await devChain?.stop()
  }
  try {
    const context = await connect(config, network, devChain, options.onRpcRequest)
    return {
      ...context,
      close: async () => {
        await context.tokenReads.close()
        await close()
      },
    }
  } catch (err) {
    await close()
    throw err
  }
}

async function connect(
  config: Config,
  network: Network,
  devChain: DevChain | null,
  onRpcRequest: RpcRequestListener | undefined,
) {
  const info = networks[network]
  const rpcUrl = devChain?.rpcUrl ?? config.chain.rpc_url
  if (!rpcUrl) {
    throw new ChainError(
      'TOLLGATE_CHAIN_RPC_URL_REQUIRED',
      `NETWORK=${network} needs an RPC endpoint: set RPC_URL (chain.rpc_url) to a ${network} JSON-RPC URL.`,
    )
  }
  const usdcAddress = configuredUsdc(config) ?? devChain?.usdcAddress ?? info.usdcAddress
  if (!usdcAddress) {
    throw new ChainError(
      'TOLLGATE_CHAIN_USDC_ADDRESS_REQUIRED',
      'NETWORK=local with RPC_URL uses a chain tollgate did not start, so it cannot know the token: ' +
        'set USDC_ADDRESS (chain.usdc_address) to the test USDC deployed there, or unset RPC_URL to let tollgate start anvil.',
    )
  }
  const account = treasuryAccount(config, network, devChain)
  const clientOptions = {
    rpcUrl,
    timeoutMs: config.chain.rpc_timeout_ms,
    batchMax: config.chain.rpc_batch_max,
    onRpcRequest,
  }
  const where = redactUrl(rpcUrl)

  let chainId: number
  try {
    // A throwaway definition: on `local` the id is only known once the node answers.
    const probe = createChainPublicClient(chainDefinition('local', info.chainId ?? 0, rpcUrl), clientOptions)
    chainId = await getChainId(probe)
  } catch (cause) {
    throw new ChainError(
      'TOLLGATE_CHAIN_RPC_UNREACHABLE',
      `the RPC endpoint ${where} did not answer eth_chainId within ${config.chain.rpc_timeout_ms} ms; ` +
        'check RPC_URL and that the node is up.',
      { cause },
    )
  }
  if (info.chainId !== null && chainId !== info.chainId) {
    throw new ChainError(
      'TOLLGATE_CHAIN_ID_MISMATCH',
      `RPC_URL ${where} serves chain ${chainId} but NETWORK=${network} is chain ${info.chainId}: ` +
        `point RPC_URL at a ${network} node or set NETWORK to match it.`,
    )
  }

  const chain = chainDefinition(network, chainId, rpcUrl)
  const publicClient = createChainPublicClient(chain, clientOptions)
  const walletClient = createChainWalletClient(chain, account, clientOptions)

  let token: Awaited<ReturnType<typeof readTokenInfo>>
  try {
    token = await readTokenInfo(publicClient, { address: usdcAddress })
  } catch (cause) {
    throw new ChainError(
      'TOLLGATE_CHAIN_USDC_UNREADABLE',
      `could not read decimals/name/version of the USDC contract ${usdcAddress} on chain ${chainId} (${where}): ` +
        'check USDC_ADDRESS (chain.usdc_address) against NETWORK, or unset it to use the network default.',
      { cause },
    )
  }
  if (token.decimals !== 6) {
    throw new ChainError(
      'TOLLGATE_CHAIN_USDC_DECIMALS',
      `the token at ${usdcAddress} has ${token.decimals} decimals, but USDC has 6 and every amount here assumes it: ` +
        'set USDC_ADDRESS (chain.usdc_address) to a USDC contract.',
    )
  }

  return {
    network,
    chainId,
    caip2: caip2(chainId),
    // On a dev chain announced as a public network, x402 clients are told that network's name.
    x402Network:
      network === 'local' && config.local_chain.announce_as
        ? config.local_chain.announce_as
        : info.x402Network,
    publicClient,
    tokenReads: createTokenReads({
      rpcUrl,
      token: usdcAddress,
      timeoutMs: config.chain.rpc_timeout_ms,
      batchMax: config.chain.rpc_batch_max,
      onRpcRequest,
    }),
    walletClient,
    treasury: account.address,
    usdc: { address: usdcAddress, ...token },
    explorerUrl: info.explorerUrl,
    rpcUrl,
    devChain,
    ownSenders: ownSendersOf(config, devChain, account.address),
  }
}

/** The treasury and the settler slots as the settlers derive their keys (src/schemes/settings.ts). */
function ownSendersOf(config: Config, devChain: DevChain | null, treasury: Address) {
  return lazyOwnSenders(() => {
    const settlerKey = config.secrets.settler_private_key ?? null
    const treasuryKey = settlerKey === null ? treasuryPrivateKey(config, devChain) : null
    return {
      treasury,
      seed: settlerKey === null && treasuryKey === null ? null : { settlerKey, treasuryKey },
      slots: config.settlement.before_answer.slots,
    }
  })
}

function configuredUsdc(config: Config): Address | null {
  const text = config.chain.usdc_address
  if (!text) return null
  try {
    return getAddress(text)
  } catch {
    throw new ChainError(
      'TOLLGATE_CHAIN_USDC_ADDRESS_INVALID',
      `USDC_ADDRESS (chain.usdc_address) ${text} fails its EIP-55 checksum: copy it again, or write it all lowercase.`,
    )
  }
}

/** The treasury's key as configured, or the dev chain's account 0 on NETWORK=local; null: none. */
export function treasuryPrivateKey(config: Config, devChain: DevChain | null): Hex | null {
  return (
    config.secrets.treasury_private_key ??
    (config.chain.network === 'local' ? (devChain?.treasury ?? devAccount(0)).privateKey : null)
  )
}

function treasuryAccount(config: Config, network: Network, devChain: DevChain | null): PrivateKeyAccount {
  const key = treasuryPrivateKey(config, devChain)
  if (!key) {
    throw new ChainError(
      'TOLLGATE_CHAIN_TREASURY_KEY_REQUIRED',
      `NETWORK=${network} needs the treasury's key: set TREASURY_PRIVATE_KEY in the environment.`,
    )
  }
  // Neither the message nor a cause may carry the key: a mistyped key is still mostly a key.
  const invalid = new ChainError(
    'TOLLGATE_CHAIN_TREASURY_KEY_INVALID',
    'TREASURY_PRIVATE_KEY must be 0x followed by 64 hex digits (a valid 32-byte secp256k1 key).',
  )
  if (!/^0x[0-9a-fA-F]{64}$/.test(key)) throw invalid
  try {
    return signingAccount(key as Hex)
  } catch {
    throw invalid
  }
}

/** Provider URLs often carry an API key in the path or query; messages keep only scheme and host. */
function redactUrl(url: string): string {
  try {
    const u = new URL(url)
    const hidden = (u.pathname !== '/' && u.pathname !== '') || u.search || u.username
    return `${u.protocol}//${u.host}${hidden ? '/…' : ''}`
  } catch {
    return 'the configured RPC_URL'
  }
}
