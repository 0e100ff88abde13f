"""Trigger tests: Lightning's (PyTorch Lightning and Fabric) messages about its hooks: the LightningModule methods
it calls at fixed points, and the tensor hook Fabric puts on outputs. One CPU step, no logger, no checkpoint."""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from message_triggers import fix, fixes_of, no_fix, trigger, triggers_of


def _data(n: int = 4) -> DataLoader:
    torch.manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 4), torch.randn(n, 1)), batch_size=2)


def _module_class():
    import pytorch_lightning as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)
    return Tiny


def _trainer(**options):
    import pytorch_lightning as pl
    settings = {"accelerator": "cpu", "devices": 1, "max_steps": 1, "logger": False, "enable_checkpointing": False,
                "enable_progress_bar": False, "enable_model_summary": False}
    return pl.Trainer(**{**settings, **options})


def _fit(model, **options):
    _trainer(**options).fit(model, train_dataloaders=_data())


# --- hooks a LightningModule must define, or may no longer ---------------------------------------------------

@trigger("train-dataloader-must-be-implemented-to-be-used-with-0102de")
def lightning_train_dataloader_not_defined():
    _module_class()().train_dataloader()


@trigger("val-dataloader-must-be-implemented-to-be-used-with-455c76")
def lightning_val_dataloader_not_defined():
    _module_class()().val_dataloader()


@trigger("test-dataloader-must-be-implemented-to-be-used-with-eb551a")
def lightning_test_dataloader_not_defined():
    _module_class()().test_dataloader()


@trigger("predict-dataloader-must-be-implemented-to-be-used-with-cbe4a4")
def lightning_predict_dataloader_not_defined():
    _module_class()().predict_dataloader()


@trigger("support-for-training-epoch-end-has-been-removed-in-fb3654")
def lightning_training_epoch_end_defined():
    class Old(_module_class()):
        def training_epoch_end(self, outputs):
            pass
    _fit(Old())


@trigger("support-for-validation-epoch-end-has-been-removed-in-babbd2")
def lightning_validation_epoch_end_defined():
    class Old(_module_class()):
        def validation_step(self, batch, batch_idx):
            pass

        def validation_epoch_end(self, outputs):
            pass
    _trainer().fit(Old(), train_dataloaders=_data(), val_dataloaders=_data())


@trigger("support-for-has-been-removed-in-v2-0-0-6c664a")
def lightning_test_epoch_end_defined():
    class Old(_module_class()):
        def test_step(self, batch, batch_idx):
            pass

        def test_epoch_end(self, outputs):
            pass
    _trainer().test(Old(), dataloaders=_data())


# --- hooks called by the trainer ----------------------------------------------------------------------------

@trigger("no-lightningmodule-is-available-to-call-hooks-on-e02c20")
def lightning_module_hook_called_without_a_module():
    from pytorch_lightning.trainer import call
    call._call_lightning_module_hook(_trainer(), "on_train_start")


@trigger("no-lightningdatamodule-is-available-to-call-hooks-on-625e85")
def lightning_datamodule_hook_called_without_a_datamodule():
    from pytorch_lightning.trainer import call
    call._call_lightning_datamodule_hook(_trainer(), "setup")


@trigger("is-not-a-shared-hook-within-lightningmodule-and-lightnin-d4c4e9")
def lightning_data_hook_selector_asked_for_another_hook():
    from pytorch_lightning.trainer.connectors.data_connector import _DataHookSelector
    _DataHookSelector(_module_class()(), None).get_instance("training_step")


@trigger("you-have-overridden-in-both-lightningmodule-and-lightnin-8ce8c2")
def lightning_batch_transfer_hook_in_module_and_datamodule():
    import pytorch_lightning as pl
    from pytorch_lightning.trainer.connectors.data_connector import _DataHookSelector

    class Module(_module_class()):
        def on_before_batch_transfer(self, batch, dataloader_idx):
            return batch

    class Data(pl.LightningDataModule):
        def on_before_batch_transfer(self, batch, dataloader_idx):
            return batch
    _DataHookSelector(Module(), Data()).get_instance("on_before_batch_transfer")


@trigger("you-have-overridden-in-lightningmodule-but-have-passed-i-1240b9")
def lightning_batch_transfer_hook_in_module_with_a_datamodule():
    import pytorch_lightning as pl
    from pytorch_lightning.trainer.connectors.data_connector import _DataHookSelector

    class Module(_module_class()):
        def on_after_batch_transfer(self, batch, dataloader_idx):
            return batch
    _DataHookSelector(Module(), pl.LightningDataModule()).get_instance("on_after_batch_transfer")


@trigger("you-are-trying-to-self-log-but-the-loop-c58dd9")
def lightning_log_in_predict_step():
    class Logs(_module_class()):
        def predict_step(self, batch, batch_idx):
            self.log("value", 1.0)
    _trainer().predict(Logs(), dataloaders=_data())


@trigger("the-closure-hasn-t-been-executed-hint-did-you-dcf788")
def lightning_optimizer_step_without_the_closure():
    class NoClosure(_module_class()):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            optimizer.step()
    _fit(NoClosure())


@trigger("you-provided-only-a-single-dataloader-but-have-included-9e6fa8")
def lightning_dataloader_idx_with_one_dataloader():
    class WithIndex(_module_class()):
        def validation_step(self, batch, batch_idx, dataloader_idx):
            pass
    _trainer().validate(WithIndex(), dataloaders=_data())


@trigger("you-provided-multiple-dataloader-but-no-dataloader-idx-a-0672c0")
def lightning_two_dataloaders_without_dataloader_idx():
    class NoIndex(_module_class()):
        def validation_step(self, batch, batch_idx):
            pass
    _trainer().validate(NoIndex(), dataloaders=[_data(), _data()])


class _NotAScheduler:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


@trigger("the-provided-lr-scheduler-doesn-t-follow-pytorch-s-a98478")
def lightning_custom_scheduler_without_lr_scheduler_step():
    class Custom(_module_class()):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": optimizer, "lr_scheduler": _NotAScheduler(optimizer)}
    _fit(Custom())


@trigger("when-using-trainer-accumulate-grad-batches-1-and-overrid-062bd4")
def lightning_accumulation_scheduler_with_optimizer_step_overridden():
    from pytorch_lightning.callbacks import GradientAccumulationScheduler

    class Steps(_module_class()):
        def optimizer_step(self, *args, **kwargs):
            super().optimizer_step(*args, **kwargs)
    _fit(Steps(), callbacks=[GradientAccumulationScheduler({0: 2})])


@trigger("you-are-using-the-dataloader-iter-step-flavor-if-7dd13a")
def lightning_training_step_taking_the_dataloader_iterator():
    class Iterates(_module_class()):
        def training_step(self, dataloader_iter):
            x, y = next(dataloader_iter)[0]
            return nn.functional.mse_loss(self.layer(x), y)
    _fit(Iterates())


# --- Fabric -------------------------------------------------------------------------------------------------

@trigger("the-current-strategy-and-precision-selection-requires-yo-95f9a9")
def fabric_loss_backward_under_mixed_precision():
    from lightning_fabric import Fabric
    fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    model = fabric.setup_module(nn.Linear(4, 1))
    model(torch.ones(1, 4)).sum().backward()


class _NotCallable:
    on_train_start = 3


@trigger("skipping-the-callback-because-it-is-not-callable-33a800")
def fabric_callback_attribute_that_is_not_a_method():
    from lightning_fabric import Fabric
    Fabric(accelerator="cpu", devices=1, callbacks=[_NotCallable()]).call("on_train_start")


# --- the sampler Lightning injects under a DDP strategy: one CPU process is enough -------------------------

def _fit_under_ddp(loader):
    import torch.distributed as dist
    trainer = _trainer(strategy="ddp")
    try:
        trainer.fit(_module_class()(), train_dataloaders=loader)
        sampler = trainer.train_dataloader.batch_sampler.sampler  # the loader Lightning rebuilt
        return {"global_step": trainer.global_step, "sampler": type(sampler).__name__}
    finally:
        if dist.is_initialized():  # the strategy's one-process group
            dist.destroy_process_group()


class _Batches(torch.utils.data.BatchSampler):
    """A BatchSampler whose arguments come in another order: Lightning cannot make it again with its sampler."""

    def __init__(self, batch_size, sampler, drop_last=False):
        super().__init__(sampler, batch_size, drop_last)


@trigger("lightning-can-t-inject-a-distributed-sampler-into-your-7c38f0")
def lightning_ddp_with_a_batch_sampler_of_another_signature():
    data = _data().dataset
    _fit_under_ddp(DataLoader(data, batch_sampler=_Batches(2, torch.utils.data.SequentialSampler(data))))


class _ScaledLoader(DataLoader):
    def __init__(self, data, scale, **options):  # neither argument is kept as an attribute
        super().__init__(data, **options)


@trigger("trying-to-inject-custom-sampler-into-the-instance-this-7a00ba")
def lightning_ddp_with_a_dataloader_subclass_that_drops_its_arguments():
    _fit_under_ddp(_ScaledLoader(_data().dataset, 2.0, batch_size=2))


@trigger("when-using-the-you-are-required-to-override-the-b63670")
def lightning_model_parallel_strategy_without_configure_model():
    import torch.distributed as dist
    from pytorch_lightning.strategies import ModelParallelStrategy
    try:
        _fit(_module_class()(), strategy=ModelParallelStrategy())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# --- fixes: each trigger's program corrected as its message (or Lightning's docs) says ----------------------------

@fix("train-dataloader-must-be-implemented-to-be-used-with-0102de",
     en="define the train_dataloader hook (or pass a DataLoader to fit)",
     zh="定义 train_dataloader 钩子（或把 DataLoader 传给 fit）")
def lightning_train_dataloader_defined():
    class WithData(_module_class()):
        def train_dataloader(self):
            return _data()
    trainer = _trainer()
    trainer.fit(WithData())  # no DataLoader passed: the hook gives it
    return {"global_step": trainer.global_step}


class _Evaluated:
    """Step hooks of the evaluation loops that count their batches."""

    def validation_step(self, batch, batch_idx):
        self.batches = getattr(self, "batches", 0) + 1

    def test_step(self, batch, batch_idx):
        self.batches = getattr(self, "batches", 0) + 1


@fix("val-dataloader-must-be-implemented-to-be-used-with-455c76",
     en="define the val_dataloader hook (or pass a DataLoader to validate)",
     zh="定义 val_dataloader 钩子（或把 DataLoader 传给 validate）")
def lightning_val_dataloader_defined():
    class WithData(_Evaluated, _module_class()):
        def val_dataloader(self):
            return _data()
    model = WithData()
    _trainer().validate(model)
    return {"validation_batches": model.batches}


@fix("test-dataloader-must-be-implemented-to-be-used-with-eb551a",
     en="define the test_dataloader hook (or pass a DataLoader to test)",
     zh="定义 test_dataloader 钩子（或把 DataLoader 传给 test）")
def lightning_test_dataloader_defined():
    class WithData(_Evaluated, _module_class()):
        def test_dataloader(self):
            return _data()
    model = WithData()
    _trainer().test(model)
    return {"test_batches": model.batches}


@fix("predict-dataloader-must-be-implemented-to-be-used-with-cbe4a4",
     en="define the predict_dataloader hook (or pass a DataLoader to predict)",
     zh="定义 predict_dataloader 钩子（或把 DataLoader 传给 predict）")
def lightning_predict_dataloader_defined():
    class WithData(_module_class()):
        def predict_dataloader(self):
            return _data()

        def predict_step(self, batch, batch_idx):
            return self.layer(batch[0])
    predictions = _trainer().predict(WithData())
    return [list(p.shape) for p in predictions]


@fix("support-for-training-epoch-end-has-been-removed-in-fb3654",
     en="on_train_epoch_end instead, with the step outputs kept in an attribute",
     zh="改用 on_train_epoch_end，每步的输出自己存在属性里")
def lightning_on_train_epoch_end_with_outputs_kept():
    class New(_module_class()):
        def __init__(self):
            super().__init__()
            self.step_outputs, self.seen_at_epoch_end = [], None

        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.step_outputs.append(loss.detach())  # kept in memory, as the message says
            return loss

        def on_train_epoch_end(self):
            self.seen_at_epoch_end = len(self.step_outputs)
            self.step_outputs.clear()
    model = New()
    _trainer(max_steps=-1, max_epochs=1).fit(model, train_dataloaders=_data())
    return {"outputs_at_epoch_end": model.seen_at_epoch_end}


@fix("support-for-validation-epoch-end-has-been-removed-in-babbd2",
     en="on_validation_epoch_end instead, with the step outputs kept in an attribute",
     zh="改用 on_validation_epoch_end，每步的输出自己存在属性里")
def lightning_on_validation_epoch_end_with_outputs_kept():
    class New(_module_class()):
        def __init__(self):
            super().__init__()
            self.step_outputs, self.seen_at_epoch_end = [], []

        def validation_step(self, batch, batch_idx):
            self.step_outputs.append(batch_idx)

        def on_validation_epoch_end(self):
            self.seen_at_epoch_end.append(len(self.step_outputs))
            self.step_outputs.clear()
    model = New()
    _trainer(max_steps=-1, max_epochs=1, num_sanity_val_steps=0).fit(model, train_dataloaders=_data(),
                                                                       val_dataloaders=_data())
    return {"outputs_at_each_epoch_end": model.seen_at_epoch_end}


@fix("support-for-has-been-removed-in-v2-0-0-6c664a",
     en="on_test_epoch_end instead, with the step outputs kept in an attribute",
     zh="改用 on_test_epoch_end，每步的输出自己存在属性里")
def lightning_on_test_epoch_end_with_outputs_kept():
    class New(_module_class()):
        def __init__(self):
            super().__init__()
            self.step_outputs, self.seen_at_epoch_end = [], None

        def test_step(self, batch, batch_idx):
            self.step_outputs.append(batch_idx)

        def on_test_epoch_end(self):
            self.seen_at_epoch_end = len(self.step_outputs)
            self.step_outputs.clear()
    model = New()
    _trainer().test(model, dataloaders=_data())
    return {"outputs_at_epoch_end": model.seen_at_epoch_end}


@fix("no-lightningmodule-is-available-to-call-hooks-on-e02c20",
     en="pass the module to fit: the Trainer calls its hooks (on_train_start) itself",
     zh="把模块传给 fit：由 Trainer 自己调用它的钩子（on_train_start）")
def lightning_module_hook_called_by_fit():
    class Starts(_module_class()):
        def on_train_start(self):
            self.started = getattr(self, "started", 0) + 1
    model = Starts()
    _fit(model)  # the Trainer calls the hook once it has the module
    return {"on_train_start_calls": model.started}


@fix("no-lightningdatamodule-is-available-to-call-hooks-on-625e85",
     en="pass the datamodule to fit: the Trainer calls its hooks (setup) itself",
     zh="把 datamodule 传给 fit：由 Trainer 自己调用它的钩子（setup）")
def lightning_datamodule_hook_called_by_fit():
    import pytorch_lightning as pl

    class Data(pl.LightningDataModule):
        def __init__(self):
            super().__init__()
            self.stages = []

        def setup(self, stage):
            self.stages.append(getattr(stage, "value", stage))  # "fit"

        def train_dataloader(self):
            return _data()
    data = Data()
    _trainer().fit(_module_class()(), datamodule=data)  # the Trainer calls its hooks once it has the datamodule
    return {"setup_stages": data.stages}


no_fix("is-not-a-shared-hook-within-lightningmodule-and-lightnin-d4c4e9",
       why="The trigger asks the Trainer's private _DataHookSelector about training_step, a hook no datamodule shares; "
           "a user never calls it: the Trainer asks it only about the three batch-transfer hooks.",
       zh="触发程序向 Trainer 私有的 _DataHookSelector 询问 training_step，而数据模块并不共享这个钩子；用户不会这样调用它："
          "Trainer 只拿三个批次搬运钩子去问它。")


@fix("you-have-overridden-in-both-lightningmodule-and-lightnin-8ce8c2",
     en="override the batch-transfer hook in one place only, here the datamodule",
     zh="批次传输钩子只在一处重写，这里放在 datamodule 里")
def lightning_batch_transfer_hook_in_the_datamodule_only():
    import pytorch_lightning as pl

    class Data(pl.LightningDataModule):
        calls = 0

        def train_dataloader(self):
            return _data()

        def on_before_batch_transfer(self, batch, dataloader_idx):  # one implementation, the datamodule's
            self.calls += 1
            return batch
    data = Data()
    _trainer().fit(_module_class()(), datamodule=data)  # the module does not override it
    return {"datamodule_hook_calls": data.calls}


@fix("you-have-overridden-in-lightningmodule-but-have-passed-i-1240b9",
     en="with a datamodule, its batch-transfer hook lives in the datamodule",
     zh="用了 datamodule，批次传输钩子就写在 datamodule 里")
def lightning_batch_transfer_hook_moved_to_the_datamodule():
    import pytorch_lightning as pl

    class Data(pl.LightningDataModule):
        calls = 0

        def train_dataloader(self):
            return _data()

        def on_after_batch_transfer(self, batch, dataloader_idx):  # moved here from the module
            self.calls += 1
            return batch
    data = Data()
    _trainer().fit(_module_class()(), datamodule=data)
    return {"datamodule_hook_calls": data.calls}


@fix("you-are-trying-to-self-log-but-the-loop-c58dd9",
     en="predict does not log: return the values from predict_step",
     zh="predict 不记录日志：让 predict_step 返回这些值")
def lightning_predict_step_returns_its_values():
    class Returns(_module_class()):
        def predict_step(self, batch, batch_idx):
            return {"value": 1.0, "batch_idx": batch_idx}  # returned, not logged
    return _trainer().predict(Returns(), dataloaders=_data())


@fix("the-closure-hasn-t-been-executed-hint-did-you-dcf788",
     en="an overridden optimizer_step passes the closure: optimizer.step(closure=optimizer_closure)",
     zh="重写的 optimizer_step 要传入闭包：optimizer.step(closure=optimizer_closure)")
def lightning_optimizer_step_with_the_closure():
    class WithClosure(_module_class()):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            optimizer.step(closure=optimizer_closure)  # the closure runs training_step and backward
    model = WithClosure()
    before = model.layer.weight.detach().clone()
    trainer = _trainer()
    trainer.fit(model, train_dataloaders=_data())
    return {"global_step": trainer.global_step, "weights_changed": not torch.equal(before, model.layer.weight)}


@fix("you-provided-only-a-single-dataloader-but-have-included-9e6fa8",
     en="give dataloader_idx a default: dataloader_idx=0",
     zh="给 dataloader_idx 一个默认值：dataloader_idx=0")
def lightning_dataloader_idx_with_a_default():
    class WithIndex(_module_class()):
        def __init__(self):
            super().__init__()
            self.seen = []

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.seen.append(dataloader_idx)
    model = WithIndex()
    _trainer().validate(model, dataloaders=_data())
    return {"dataloader_idx_seen": model.seen}


@fix("you-provided-multiple-dataloader-but-no-dataloader-idx-a-0672c0",
     en="with several DataLoaders, the step takes dataloader_idx=0",
     zh="有多个 DataLoader 时，step 方法要接收 dataloader_idx=0")
def lightning_two_dataloaders_with_dataloader_idx():
    class WithIndex(_module_class()):
        def __init__(self):
            super().__init__()
            self.seen = []

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.seen.append(dataloader_idx)
    model = WithIndex()
    _trainer().validate(model, dataloaders=[_data(), _data()])
    return {"dataloader_idx_seen": model.seen}


class _CountingScheduler(_NotAScheduler):
    def __init__(self, optimizer):
        super().__init__(optimizer)
        self.steps = 0

    def step(self):
        self.steps += 1


@fix("the-provided-lr-scheduler-doesn-t-follow-pytorch-s-a98478",
     en="a scheduler outside PyTorch's API is stepped in an overridden lr_scheduler_step",
     zh="不符合 PyTorch 接口的调度器，在重写的 lr_scheduler_step 里推进")
def lightning_custom_scheduler_with_lr_scheduler_step():
    class Custom(_module_class()):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            self.scheduler = _CountingScheduler(optimizer)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": self.scheduler, "interval": "step"}}

        def lr_scheduler_step(self, scheduler, metric):  # how to step a scheduler Lightning does not know
            scheduler.step()
    model = Custom()
    _fit(model)
    return {"scheduler_steps": model.scheduler.steps}


@fix("when-using-trainer-accumulate-grad-batches-1-and-overrid-062bd4",
     en="leave optimizer_step alone; count optimizer steps in on_before_optimizer_step",
     zh="不重写 optimizer_step；在 on_before_optimizer_step 里统计优化器步数")
def lightning_accumulation_scheduler_with_a_hook_called_per_optimizer_step():
    from pytorch_lightning.callbacks import GradientAccumulationScheduler

    class Steps(_module_class()):  # optimizer_step left alone; what it did goes in a hook meant for it
        optimizer_steps, batches = 0, 0

        def on_before_optimizer_step(self, optimizer):
            self.optimizer_steps += 1

        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.batches += 1
    model = Steps()
    _fit(model, callbacks=[GradientAccumulationScheduler({0: 2})])
    return {"batches": model.batches, "optimizer_steps": model.optimizer_steps}


@fix("you-are-using-the-dataloader-iter-step-flavor-if-7dd13a",
     en="the usual training_step(batch, batch_idx): batch_idx is the batch's index",
     zh="用常规的 training_step(batch, batch_idx)：batch_idx 就是批次的序号")
def lightning_training_step_taking_the_batch():
    class Steps(_module_class()):
        def __init__(self):
            super().__init__()
            self.seen = []

        def training_step(self, batch, batch_idx):  # the usual flavor: batch_idx is the batch's index
            self.seen.append(batch_idx)
            return super().training_step(batch, batch_idx)
    model = Steps()
    _trainer(max_steps=-1, max_epochs=1).fit(model, train_dataloaders=_data())
    return {"batch_idx_seen": model.seen}


@fix("the-current-strategy-and-precision-selection-requires-yo-95f9a9",
     en="call fabric.backward(loss) instead of loss.backward()",
     zh="调用 fabric.backward(loss)，而不是 loss.backward()")
def fabric_backward_under_mixed_precision():
    from lightning_fabric import Fabric
    fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    model = fabric.setup_module(nn.Linear(4, 1))
    fabric.backward(model(torch.ones(1, 4)).sum())  # Fabric's backward, which its precision plugin wraps
    return {"grad_shape": list(model.weight.grad.shape), "finite": bool(model.weight.grad.isfinite().all())}


class _Callable:
    calls = 0

    def on_train_start(self):
        type(self).calls += 1


@fix("skipping-the-callback-because-it-is-not-callable-33a800",
     en="the callback's attribute named like the hook is a method",
     zh="回调里与钩子同名的属性要是一个方法")
def fabric_callback_with_a_method():
    from lightning_fabric import Fabric
    _Callable.calls = 0
    Fabric(accelerator="cpu", devices=1, callbacks=[_Callable()]).call("on_train_start")
    return {"on_train_start_calls": _Callable.calls}


class _BatchSamplerApi(torch.utils.data.BatchSampler):
    """The same batch sampler, with BatchSampler's arguments in BatchSampler's order."""

    def __init__(self, sampler, batch_size, drop_last=False):
        super().__init__(sampler, batch_size, drop_last)


@fix("lightning-can-t-inject-a-distributed-sampler-into-your-7c38f0",
     en="the batch sampler takes BatchSampler's arguments in BatchSampler's order",
     zh="批采样器的参数与 BatchSampler 一致，顺序也相同")
def lightning_ddp_with_a_batch_sampler_of_the_batch_sampler_api():
    data = _data().dataset
    loader = DataLoader(data, batch_sampler=_BatchSamplerApi(torch.utils.data.SequentialSampler(data), 2))
    return _fit_under_ddp(loader)


class _ScaledLoaderKeepingItsArguments(DataLoader):
    def __init__(self, dataset, scale, **options):
        self.scale = scale  # every __init__ argument kept as an attribute of the same name (dataset: DataLoader's)
        super().__init__(dataset, **options)


@fix("trying-to-inject-custom-sampler-into-the-instance-this-7a00ba",
     en="the DataLoader subclass keeps each __init__ argument as an attribute of the same name",
     zh="DataLoader 子类把 __init__ 的每个参数存成同名属性")
def lightning_ddp_with_a_dataloader_subclass_that_keeps_its_arguments():
    return _fit_under_ddp(_ScaledLoaderKeepingItsArguments(_data().dataset, 2.0, batch_size=2))


@fix("when-using-the-you-are-required-to-override-the-b63670",
     en="override configure_model, where the model is parallelized",
     zh="重写 configure_model，在那里对模型做并行化")
def lightning_model_parallel_strategy_with_configure_model():
    import torch.distributed as dist
    from pytorch_lightning.strategies import ModelParallelStrategy

    class Parallel(_module_class()):
        def configure_model(self):
            self.configured = True  # where the model is parallelized (fully_shard, parallelize_module) on a mesh
    model = Parallel()
    trainer = _trainer(strategy=ModelParallelStrategy())
    try:
        trainer.fit(model, train_dataloaders=_data())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return {"configured": model.configured, "global_step": trainer.global_step}


test_trigger = triggers_of(__name__)
test_fix = fixes_of(__name__)
