// viem clients for one RPC endpoint: batched JSON-RPC over HTTP with a bounded timeout and few retries,
// so a slow node turns into rpc_unavailable quickly instead of holding requests.
import {
  type Chain,
  createPublicClient,
  createWalletClient,
  defineChain,
  http,
  type PublicClient,
  type Transport,
  type WalletClient,
} from 'viem'
import type { PrivateKeyAccount } from 'viem/accounts'
import { base, baseSepolia } from 'viem/chains'
import type { Network } from '../config/schema.ts'

export type ChainPublicClient = PublicClient<Transport, Chain>
export type ChainWalletClient = WalletClient<Transport, Chain, PrivateKeyAccount>

export interface ClientOptions {
  rpcUrl: string
  timeoutMs: number
  /** Default 1: each retry of a hung node costs a whole timeout; the caller answers 503 rather than wait. */
  retryCount?: number
  /** How often viem's own pollers (waitForTransactionReceipt) ask. Default 1000 ms. */
  pollingIntervalMs?: number
  /** Calls per JSON-RPC batch, at most (chain.rpc_batch_max; viem's own default is 1,000). */
  batchMax?: number
  /** Told of every HTTP request sent to the node (after batching), so it can be counted. */
  onRpcRequest?: RpcRequestListener
}

/**
 * `request`: one HTTP request to the node, named by its JSON-RPC method or 'batch' when it carries several;
 * `calls`: the JSON-RPC methods it carries (one per call).
 */
export type RpcRequestListener = (request: string, calls: string[]) => void

const METHOD = /"method":"([A-Za-z0-9_]+)"/g

export function chainDefinition(network: Network, chainId: number, rpcUrl: string): Chain {
  // viem's Base definitions carry the OP-stack formatters (deposit transactions in blocks).
  if (network === 'base') return base
  if (network === 'base-sepolia') return baseSepolia
  return defineChain({
    id: chainId,
    name: 'tollgate local',
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  })
}

export function createRpcTransport(options: ClientOptions): Transport {
  const listener = options.onRpcRequest
  return http(options.rpcUrl, {
    // Counted at the fetch, after batching: one count per HTTP request the node really receives. A regex
    // over the body viem just serialized is cheaper than a Request object (onFetchRequest builds one).
    ...(listener ? { fetchFn: countingFetch(listener) } : {}),
    // Concurrent calls in one tick (receipt + head block, a verification burst) go out as one HTTP request.
    batch: { wait: 0, ...(options.batchMax ? { batchSize: options.batchMax } : {}) },
    timeout: options.timeoutMs,
    retryCount: options.retryCount ?? 1,
    retryDelay: 100,
  })
}

export function createChainPublicClient(chain: Chain, options: ClientOptions): ChainPublicClient {
  return createPublicClient({
    chain,
    transport: createRpcTransport(options),
    pollingInterval: options.pollingIntervalMs ?? 1000,
  }) as ChainPublicClient
}

export function createChainWalletClient(
  chain: Chain,
  account: PrivateKeyAccount,
  options: ClientOptions,
): ChainWalletClient {
  return createWalletClient({
    chain,
    account,
    transport: createRpcTransport(options),
    pollingInterval: options.pollingIntervalMs ?? 1000,
  })
}

function countingFetch(listener: RpcRequestListener): typeof fetch {
  return (input, init) => {
    const body = typeof init?.body === 'string' ? init.body : ''
    const calls = Array.from(body.matchAll(METHOD), (m) => m[1]!)
    // viem's batching sends a lone call as a batch of one: named by its method all the same.
    listener(calls.length === 1 ? calls[0]! : calls.length === 0 ? 'unknown' : 'batch', calls)
    return fetch(input, init)
  }
}
