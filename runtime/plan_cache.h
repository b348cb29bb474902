// A bounded least-recently-used map from signatures to compiled entries.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <unordered_map>
#include <utility>

#include "runtime/signature.h"

namespace zenith {

template <typename Entry>
class PlanCache {
 public:
  explicit PlanCache(std::size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  /// The entry for `signature`, marked most recently used; null when absent.
  std::shared_ptr<const Entry> find(const Signature& signature) {
    auto it = index_.find(signature);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  /// Inserts or replaces; returns how many entries were evicted to make room.
  std::size_t insert(const Signature& signature, std::shared_ptr<const Entry> entry) {
    if (auto it = index_.find(signature); it != index_.end()) {
      it->second->second = std::move(entry);
      order_.splice(order_.begin(), order_, it->second);
      return 0;
    }
    order_.emplace_front(signature, std::move(entry));
    index_[signature] = order_.begin();
    std::size_t evicted = 0;
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++evicted;
    }
    return evicted;
  }

  /// Calls `visit` with each entry, most recently used first.
  template <typename Visit>
  void for_each(Visit&& visit) const {
    for (const auto& item : order_) visit(*item.second);
  }

  std::size_t size() const { return order_.size(); }
  std::size_t capacity() const { return capacity_; }

 private:
  using Item = std::pair<Signature, std::shared_ptr<const Entry>>;
  std::size_t capacity_;
  std::list<Item> order_;
  std::unordered_map<Signature, typename std::list<Item>::iterator, SignatureHash> index_;
};

}  // namespace zenith
