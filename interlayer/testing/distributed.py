"""The conformance suite's distributed part (`DistributedTests`)."""

from __future__ import annotations

from .case import _parameters_zero3_init_would_miss


class DistributedTests:
    """Several processes: FSDP2 units and DeepSpeed ZeRO-3's partitioning at construction."""

    def test_fsdp_units_cover_every_layer_and_no_parameter_is_0d(self, tmp_path):
        """What FSDP needs from the model class and from its base model class: every name in `_no_split_modules` is
        a module class of the model (accelerate's FSDP plugin refuses a name it cannot find), every layer
        (`GradientCheckpointingLayer`) lies inside a module so named (each layer becomes its own FSDP unit), and no
        parameter is 0-d (`fully_shard` refuses them). tests/tooling/test_fsdp.py trains one class of each mechanism
        sharded."""
        from transformers.modeling_layers import GradientCheckpointingLayer

        from interlayer.zoo import ZOO

        folder, _ = self._stock(tmp_path)
        config_class = self.case.model_class.config_class
        base_class = next(e.model_class for e in ZOO if e.config_class is config_class and e.task == "base")
        for model_class in (self.case.model_class, base_class):
            model = model_class.from_pretrained(folder, **self.case.active_options)
            names = set(model._no_split_modules or ())
            classes = {type(m).__name__ for m in model.modules()}
            assert names and names <= classes, f"_no_split_modules {sorted(names - classes)} not in {model_class}"
            units = [n for n, m in model.named_modules() if type(m).__name__ in names]
            layers = [n for n, m in model.named_modules() if isinstance(m, GradientCheckpointingLayer)]
            assert layers, f"no layer found in {model_class}"
            for layer in layers:
                assert any(layer == u or layer.startswith(u + ".") for u in units), f"{layer}: in no no-split module"
            scalars = [n for n, p in model.named_parameters() if p.ndim == 0]
            assert not scalars, f"{model_class.__name__}: 0-d parameters (FSDP2 refuses them): {scalars}"

    def test_zero3_init_partitions_every_parameter(self, tmp_path):
        """`from_pretrained` under DeepSpeed ZeRO-3 builds the model in `deepspeed.zero.Init`, which partitions a
        module's parameters when the outermost `__init__` that an `nn.Module` class defines in its own `__dict__`
        returns: a parameter a mixin adds after the stock `__init__` (gates, read-outs) would stay whole on every rank
        unless the composed class has an `__init__` of its own (`generate_classes.py`). Checked by doing
        DeepSpeed's wrapping without DeepSpeed; tests/tooling/test_deepspeed.py loads three classes under the real
        one."""
        folder, _ = self._stock(tmp_path)
        config = self._zoo(folder, **self.case.active_options).config
        missed = _parameters_zero3_init_would_miss(lambda: self.case.model_class(config))
        assert not missed, f"zero.Init would leave these parameters whole: {missed}"
