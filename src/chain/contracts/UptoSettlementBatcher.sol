// SPDX-License-Identifier: MIT
// Settles many x402 `upto` permits in one transaction. The upto proxy lets only the witness's facilitator
// settle, for an amount it chooses up to the signed maximum, so this contract is the facilitator tollgate
// offers in its 402: payers sign it into their witness, and it lets only its settler (tollgate's treasury)
// choose amounts — anyone else could charge a payer the whole maximum. Deployed through the deterministic
// deployer (salt 0, the settler as constructor argument): one address per settler on every chain. The
// settler sits in storage, not in an immutable, so the dev chain installs the runtime code with
// anvil_setCode and writes slot 0. The settler may name delegates (tollgate's settler slots, which settle
// before the answer from keys of their own): they settle as it does; only the settler names or removes them.
// settleWithPermits carries the payers' EIP-2612 permits of the x402 `eip2612GasSponsoring` extension (a
// payer who never approved Permit2 signs one beside its upto permit): those items go through the proxy's
// settleWithPermit, which submits the approval first. settle keeps its ABI: batches without a permit are
// encoded as before.
pragma solidity ^0.8.24;

import {Permit2} from './Permit2.sol';
import {X402UptoPermit2Proxy} from './X402UptoPermit2Proxy.sol';

contract UptoSettlementBatcher {
  X402UptoPermit2Proxy public constant PROXY = X402UptoPermit2Proxy(0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002);

  struct Item {
    Permit2.PermitTransferFrom permit;
    uint256 amount;
    address owner;
    X402UptoPermit2Proxy.Witness witness;
    bytes signature;
  }

  /// Gas left before an item is attempted: an item that fails with this much failed on its own.
  uint256 public constant ITEM_GAS = 250_000;

  address public settler;
  /// Accounts the settler lets settle for it (slot 1: keccak256(account . 1) holds each flag).
  mapping(address => bool) public delegates;

  /// One per permit that moved money, for the settlement job and reconcile: who paid, which nonce, how much.
  event UptoSettled(address indexed owner, uint256 indexed nonce, uint256 amount);
  /// `attempted` items were tried in order; later ones were not (gas ran short) and are left for another batch.
  event BatchSettled(uint256 attempted, uint256 succeeded);
  event DelegateSet(address indexed account, bool allowed);

  error NotSettler();
  error LengthMismatch();

  constructor(address settler_) {
    settler = settler_;
  }

  function setDelegates(address[] calldata accounts, bool allowed) external {
    if (msg.sender != settler) revert NotSettler();
    for (uint256 i; i < accounts.length; ++i) {
      delegates[accounts[i]] = allowed;
      emit DelegateSet(accounts[i], allowed);
    }
  }

  function settle(Item[] calldata items) external {
    if (msg.sender != settler && !delegates[msg.sender]) revert NotSettler();
    uint256 i;
    uint256 succeeded;
    for (; i < items.length; ++i) {
      if (gasleft() < ITEM_GAS) break;
      Item calldata it = items[i];
      // A revert is caught: one bad permit (spent nonce, moved funds, expired) never sinks the batch.
      try PROXY.settle(it.permit, it.amount, it.owner, it.witness, it.signature) {
        ++succeeded;
        emit UptoSettled(it.owner, it.permit.nonce, it.amount);
      } catch {}
    }
    emit BatchSettled(i, succeeded);
  }

  /// As settle; permits[i] is items[i]'s EIP-2612 approval of Permit2 (a zero deadline: none).
  function settleWithPermits(Item[] calldata items, X402UptoPermit2Proxy.EIP2612Permit[] calldata permits)
    external
  {
    if (msg.sender != settler && !delegates[msg.sender]) revert NotSettler();
    if (permits.length != items.length) revert LengthMismatch();
    uint256 i;
    uint256 succeeded;
    for (; i < items.length; ++i) {
      if (gasleft() < ITEM_GAS) break;
      if (_settleOne(items[i], permits[i])) ++succeeded;
    }
    emit BatchSettled(i, succeeded);
  }

  function _settleOne(Item calldata it, X402UptoPermit2Proxy.EIP2612Permit calldata p) private returns (bool) {
    if (p.deadline == 0) {
      try PROXY.settle(it.permit, it.amount, it.owner, it.witness, it.signature) {} catch {
        return false;
      }
    } else {
      try PROXY.settleWithPermit(p, it.permit, it.amount, it.owner, it.witness, it.signature) {} catch {
        return false;
      }
    }
    emit UptoSettled(it.owner, it.permit.nonce, it.amount);
    return true;
  }
}
