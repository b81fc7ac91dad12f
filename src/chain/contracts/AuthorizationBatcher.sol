// SPDX-License-Identifier: MIT
// Settles many EIP-3009 authorizations in one transaction: one signature, one broadcast and one receipt per
// batch instead of per authorization. Stateless and permissionless: transferWithAuthorization pays each
// authorization's own `to` whoever submits it, so calling this contract can move money only where its
// payers already signed it to go. Installed at the address of its CREATE2 deployment through the
// deterministic deployer (0x4e59b44847b379578588920ca78fbf26c0b4956c, salt 0): the same address on every
// chain, so the service finds it by its code and needs no configured address.
//
// A smart wallet not deployed yet signs with an ERC-6492 wrapper (its factory, the factory's calldata, its
// own signature, then the magic suffix): the batcher calls the factory when the payer has no code, then hands
// the token the inner signature. The factory call can only create the wallet its payer committed to (the
// token asks that wallet); which factories tollgate accepts is the verifier's choice, not this contract's.
pragma solidity ^0.8.24;

interface IERC3009 {
  function transferWithAuthorization(
    address from,
    address to,
    uint256 value,
    uint256 validAfter,
    uint256 validBefore,
    bytes32 nonce,
    uint8 v,
    bytes32 r,
    bytes32 s
  ) external;

  function transferWithAuthorization(
    address from,
    address to,
    uint256 value,
    uint256 validAfter,
    uint256 validBefore,
    bytes32 nonce,
    bytes calldata signature
  ) external;
}

contract AuthorizationBatcher {
  struct Authorization {
    address from;
    address to;
    uint256 value;
    uint256 validAfter;
    uint256 validBefore;
    bytes32 nonce;
    bytes signature;
  }

  /// Gas left before an item is attempted. An item that fails with this much available failed on its own
  /// (bad signature, used nonce, closed window, short balance), never for want of gas.
  uint256 public constant ITEM_GAS = 200_000;

  /// Gas an ERC-6492 item needs beyond ITEM_GAS for its wallet's deployment: with less left it is not
  /// attempted (a deployment cut short would fail the item for want of gas).
  uint256 public constant DEPLOY_GAS = 500_000;

  /// ERC-6492's suffix: the last 32 bytes of a wrapped signature.
  bytes32 private constant ERC6492_SUFFIX = 0x6492649264926492649264926492649264926492649264926492649264926492;

  /// `attempted` items were tried, in order; those after it were not (the transaction ran short of gas) and
  /// are left for another batch. Which attempts succeeded is told by the token's own AuthorizationUsed events.
  event BatchSettled(address indexed token, uint256 attempted, uint256 succeeded);

  function settle(IERC3009 token, Authorization[] calldata items) external {
    uint256 i;
    uint256 succeeded;
    for (; i < items.length; ++i) {
      if (gasleft() < ITEM_GAS) break;
      Authorization calldata a = items[i];
      bytes calldata sig = a.signature;
      bool ok;
      if (sig.length == 65) {
        ok = _transfer(token, a, sig);
      } else if (_isErc6492(sig)) {
        // Only a signature longer than an EOA's can be a wrapper: the common item pays nothing for this.
        if (gasleft() < ITEM_GAS + DEPLOY_GAS) break;
        ok = _deployAndTransfer(token, a, sig);
      } else {
        ok = _transferBytes(token, a, sig);
      }
      if (ok) ++succeeded;
    }
    emit BatchSettled(address(token), i, succeeded);
  }

  /// A 65-byte signature goes through the (v, r, s) overload every FiatTokenV2 has; anything else (a smart
  /// wallet's, EIP-1271) through the bytes overload. A revert is caught: one bad item never sinks the batch.
  function _transfer(IERC3009 token, Authorization calldata a, bytes calldata sig) private returns (bool) {
    uint8 v = uint8(sig[64]);
    if (v < 27) v += 27;
    try
      token.transferWithAuthorization(
        a.from,
        a.to,
        a.value,
        a.validAfter,
        a.validBefore,
        a.nonce,
        v,
        bytes32(sig[0:32]),
        bytes32(sig[32:64])
      )
    {
      return true;
    } catch {
      return false;
    }
  }

  function _transferBytes(IERC3009 token, Authorization calldata a, bytes memory sig) private returns (bool) {
    try token.transferWithAuthorization(a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, sig) {
      return true;
    } catch {
      return false;
    }
  }

  function _isErc6492(bytes calldata sig) private pure returns (bool) {
    return sig.length > 96 && bytes32(sig[sig.length - 32:]) == ERC6492_SUFFIX;
  }

  /// The payer's wallet created through its factory when it has no code yet (a failed creation is the
  /// transfer's failure: the token cannot ask a wallet that is not there), then the transfer with the inner
  /// signature. A wrapper that does not decode fails its item alone.
  function _deployAndTransfer(IERC3009 token, Authorization calldata a, bytes calldata sig) private returns (bool) {
    address factory;
    bytes memory factoryCalldata;
    bytes memory inner;
    try this.unwrapErc6492(sig[:sig.length - 32]) returns (address f, bytes memory d, bytes memory s) {
      (factory, factoryCalldata, inner) = (f, d, s);
    } catch {
      return false;
    }
    if (a.from.code.length == 0) {
      (bool created, ) = factory.call{gas: DEPLOY_GAS}(factoryCalldata);
      if (!created || a.from.code.length == 0) return false;
    }
    // The wallet's own signature, through the bytes overload: the token asks the wallet (EIP-1271).
    return _transferBytes(token, a, inner);
  }

  /// ERC-6492's wrapper without its suffix: abi.encode(factory, factoryCalldata, signature). External so a
  /// malformed one reverts here, caught by the caller, instead of sinking the batch.
  function unwrapErc6492(bytes calldata wrapper) external pure returns (address, bytes memory, bytes memory) {
    return abi.decode(wrapper, (address, bytes, bytes));
  }
}
